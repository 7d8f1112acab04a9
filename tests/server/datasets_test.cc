// Named datasets on one server (--dataset NAME=DIR, --shards DIR as "default"): a
// registration names its dataset, two jobs on two datasets stream at once with exactly
// their own n, and status and health report every dataset by name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "server/serving/dataset_registry.h"
#include "server/status/metrics_text.h"
#include "tests/server/server_test_support.h"

namespace shardcast::server_testing {
namespace {

using ::testing::HasSubstr;

// Keys of every valid sample of a stream.
std::multiset<std::string> Keys(const StreamResult& stream) {
  std::multiset<std::string> keys;
  for (const v1::Batch& batch : stream.batches) {
    for (const v1::SampleInfo& info : batch.samples()) {
      if (info.valid()) keys.insert(info.key());
    }
  }
  return keys;
}

std::set<std::string> IndexKeys(const std::string& dir) {
  Reference reference(dir);
  std::set<std::string> keys;
  for (const auto& shard : reference.index().shards) {
    for (const auto& sample : shard.samples) keys.insert(sample.key);
  }
  return keys;
}

v1::RegisterRequest OnDataset(v1::RegisterRequest request, const std::string& dataset) {
  request.set_dataset(dataset);
  return request;
}

// Appends a byte to the first shard of `dir` (by name), so that the server finds it
// changed (its size) when a stream reads it; returns the shard's file name.
std::string ChangeAShard(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".tar") names.push_back(entry.path().filename().string());
  }
  EXPECT_FALSE(names.empty()) << dir;
  if (names.empty()) return "";
  std::sort(names.begin(), names.end());
  std::ofstream(dir + "/" + names[0], std::ios::binary | std::ios::app) << '\0';
  return names[0];
}

class DatasetsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Different sizes, so each job's n says which dataset it read.
    MakeDataset(train_.path(), /*samples=*/60, /*per_shard=*/15, /*size=*/48);
    MakeDataset(val_.path(), /*samples=*/23, /*per_shard=*/10, /*size=*/48);
  }
  TempDir train_;
  TempDir val_;
};

TEST_F(DatasetsTest, TwoJobsOnTwoDatasetsStreamAtOnceEachWithExactlyItsN) {
  server::ServerOptions options;
  options.datasets = {{"val", val_.path()}};
  InProcessServer server(train_.path(), options);  // --shards: "default"

  // Job "train" leaves the dataset empty (the default), job "eval" names "val".
  v1::RegisterResponse train, eval;
  ASSERT_TRUE(Register(server.stub(), MakeRegister("train", 0, 2, 4), &train).ok());
  ASSERT_TRUE(Register(server.stub(), MakeRegister("train", 1, 2, 4), &train).ok());
  v1::RegisterRequest eval_request = OnDataset(MakeRegister("eval", 0, 2, 4), "val");
  eval_request.set_remainder(v1::REMAINDER_PAD);
  grpc::Status registered = Register(server.stub(), eval_request, &eval);
  ASSERT_TRUE(registered.ok()) << registered.error_message();
  eval_request.set_rank(1);
  ASSERT_TRUE(Register(server.stub(), eval_request, &eval).ok());
  EXPECT_EQ(train.dataset(), "default");
  EXPECT_EQ(eval.dataset(), "val");
  EXPECT_EQ(train.num_samples(), 60);
  EXPECT_EQ(eval.num_samples(), 23);
  EXPECT_EQ(train.batches_per_epoch(), 60 / (4 * 2));
  EXPECT_EQ(eval.batches_per_epoch(), (23 + 7) / 8);  // pad: ceil(N / (B*W))

  // All four streams at once.
  StreamResult streams[2][2];
  std::vector<std::thread> threads;
  for (int job = 0; job < 2; ++job) {
    for (int rank = 0; rank < 2; ++rank) {
      threads.emplace_back([&, job, rank] {
        streams[job][rank] = StreamAll(server.stub(), job == 0 ? "train" : "eval", rank, 0, 0);
      });
    }
  }
  for (std::thread& t : threads) t.join();
  std::multiset<std::string> train_keys, eval_keys;
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(streams[0][rank].status.ok()) << streams[0][rank].status.error_message();
    ASSERT_TRUE(streams[1][rank].status.ok()) << streams[1][rank].status.error_message();
    EXPECT_EQ(static_cast<int64_t>(streams[0][rank].batches.size()), train.batches_per_epoch());
    EXPECT_EQ(static_cast<int64_t>(streams[1][rank].batches.size()), eval.batches_per_epoch());
    for (const std::string& key : Keys(streams[0][rank])) train_keys.insert(key);
    for (const std::string& key : Keys(streams[1][rank])) eval_keys.insert(key);
  }
  // Each job read its own dataset: the val job every val sample exactly once.
  const std::set<std::string> val_set = IndexKeys(val_.path());
  EXPECT_EQ(eval_keys.size(), val_set.size());
  EXPECT_EQ(std::set<std::string>(eval_keys.begin(), eval_keys.end()), val_set);
  const std::set<std::string> train_set = IndexKeys(train_.path());
  for (const std::string& key : train_keys) EXPECT_TRUE(train_set.count(key)) << key;
  EXPECT_EQ(train_keys.size(), 60u / 8 * 8);

  // Status: both datasets by name, each job with its dataset.
  const v1::GetStatusResponse status = GetStatus(server.stub());
  EXPECT_TRUE(status.serving());
  ASSERT_EQ(status.datasets_size(), 2);
  EXPECT_EQ(status.datasets(0).name(), "default");
  EXPECT_EQ(status.datasets(0).num_samples(), 60);
  EXPECT_EQ(status.datasets(1).name(), "val");
  EXPECT_EQ(status.datasets(1).num_samples(), 23);
  EXPECT_EQ(status.datasets(1).state(), v1::DatasetStatus::SERVING);
  EXPECT_EQ(status.num_samples(), 60);  // the single-dataset fields: "default"
  ASSERT_EQ(status.jobs_size(), 2);
  for (const v1::JobStatus& job : status.jobs()) {
    EXPECT_EQ(job.dataset(), job.job_id() == "eval" ? "val" : "default");
  }
  auto channel = MakeChannel(server.target());
  EXPECT_EQ(Health(channel, "shardcast.v1.Shardcast/val"),
            grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(Health(channel, "shardcast.v1.Shardcast/default"),
            grpc::health::v1::HealthCheckResponse::SERVING);
}

// Issue 29: with three datasets whose shards had changed, status said "changed shards
// 1": only the primary dataset's problems were reported. Every dataset's are now, in
// status and /metrics, each naming its dataset.
TEST_F(DatasetsTest, ChangedShardsOfEveryDatasetAreReportedWithTheirDataset) {
  TempDir test;
  MakeDataset(test.path(), /*samples=*/20, /*per_shard=*/10, /*size=*/48);
  server::ServerOptions options;
  options.datasets = {{"val", val_.path()}, {"test", test.path()}};
  InProcessServer server(train_.path(), options);  // "default": the single-dataset fields'
  const std::string val_shard = ChangeAShard(val_.path());
  const std::string test_shard = ChangeAShard(test.path());

  // The server finds a shard changed when a stream reads it: that stream fails.
  for (const std::string dataset : {"val", "test"}) {
    v1::RegisterResponse response;
    ASSERT_TRUE(
        Register(server.stub(), OnDataset(MakeRegister(dataset, 0, 1, 4), dataset), &response)
            .ok());
    StreamResult stream = StreamAll(server.stub(), dataset, 0, 0, 0);
    EXPECT_EQ(stream.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << dataset << ": " << stream.status.error_message();
  }

  const v1::GetStatusResponse status = GetStatus(server.stub());
  EXPECT_EQ(status.total_changed_shards(), 2);
  ASSERT_EQ(status.changed_shards_size(), 2);
  EXPECT_EQ(status.changed_shards(0).dataset(), "val");
  EXPECT_EQ(status.changed_shards(0).path(), val_shard);
  EXPECT_EQ(status.changed_shards(1).dataset(), "test");
  EXPECT_EQ(status.changed_shards(1).path(), test_shard);
  EXPECT_THAT(status.changed_shards(1).reason(), HasSubstr("size"));
  ASSERT_EQ(status.datasets_size(), 3);
  EXPECT_EQ(status.datasets(0).name(), "default");
  EXPECT_EQ(status.datasets(0).total_changed_shards(), 0);
  EXPECT_EQ(status.datasets(1).total_changed_shards(), 1);
  EXPECT_EQ(status.datasets(2).total_changed_shards(), 1);
  EXPECT_EQ(status.total_skipped_shards(), 0);

  const std::string metrics = server::RenderPrometheusText(server.server().impl().Metrics());
  EXPECT_THAT(metrics,
              HasSubstr("shardcast_shard_problems{dataset=\"default\",problem=\"changed\"} 0\n"));
  EXPECT_THAT(metrics,
              HasSubstr("shardcast_shard_problems{dataset=\"val\",problem=\"changed\"} 1\n"));
  EXPECT_THAT(metrics,
              HasSubstr("shardcast_shard_problems{dataset=\"test\",problem=\"changed\"} 1\n"));
  EXPECT_THAT(metrics,
              HasSubstr("shardcast_shard_problems{dataset=\"test\",problem=\"skipped\"} 0\n"));
}

TEST_F(DatasetsTest, ADatasetNameIsResolvedOrRefusedWithTheNames) {
  server::ServerOptions options;
  options.datasets = {{"train", train_.path()}, {"val", val_.path()}};
  options.listen_address = "127.0.0.1:0";
  options.decode_threads = 1;
  server::Daemon server(options);  // no --shards: no "default"
  ASSERT_TRUE(server.Start().ok());
  ASSERT_TRUE(server.WaitUntilReady().ok());
  auto stub = v1::Shardcast::NewStub(MakeChannel(absl::StrCat("127.0.0.1:", server.port())));
  v1::RegisterResponse response;

  grpc::Status unnamed = Register(stub.get(), MakeRegister("a", 0, 1, 4), &response);
  EXPECT_EQ(unnamed.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(unnamed.error_message(), HasSubstr("train, val"));

  grpc::Status unknown =
      Register(stub.get(), OnDataset(MakeRegister("a", 0, 1, 4), "test"), &response);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(unknown.error_message(), HasSubstr("'test' is not served here"));
  EXPECT_THAT(unknown.error_message(), HasSubstr("train, val"));

  // Ranks of one job must agree on the dataset.
  ASSERT_TRUE(Register(stub.get(), OnDataset(MakeRegister("a", 0, 2, 4), "train"), &response).ok());
  grpc::Status other =
      Register(stub.get(), OnDataset(MakeRegister("a", 1, 2, 4), "val"), &response);
  EXPECT_EQ(other.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(other.error_message(), HasSubstr("reads dataset 'train'"));
}

TEST_F(DatasetsTest, OneDatasetIsTakenWithoutItsName) {
  server::ServerOptions options;
  options.datasets = {{"only", val_.path()}};
  options.listen_address = "127.0.0.1:0";
  options.decode_threads = 1;
  server::Daemon server(options);
  ASSERT_TRUE(server.Start().ok());
  ASSERT_TRUE(server.WaitUntilReady().ok());
  auto stub = v1::Shardcast::NewStub(MakeChannel(absl::StrCat("127.0.0.1:", server.port())));
  v1::RegisterResponse response;
  ASSERT_TRUE(Register(stub.get(), MakeRegister("a", 0, 1, 4), &response).ok());
  EXPECT_EQ(response.dataset(), "only");
  EXPECT_EQ(response.num_samples(), 23);
}

TEST_F(DatasetsTest, ADatasetThatCannotBeIndexedIsReportedByName) {
  TempDir empty;
  server::ServerOptions options;
  options.shards_dir = train_.path();
  options.datasets = {{"broken", empty.path()}};  // no shard in it
  options.listen_address = "127.0.0.1:0";
  options.decode_threads = 1;
  server::Daemon server(options);
  ASSERT_TRUE(server.Start().ok());
  absl::Status ready = server.WaitUntilReady();
  ASSERT_FALSE(ready.ok());
  EXPECT_THAT(std::string(ready.message()), HasSubstr("dataset 'broken'"));
  auto channel = MakeChannel(absl::StrCat("127.0.0.1:", server.port()));
  auto stub = v1::Shardcast::NewStub(channel);
  const v1::GetStatusResponse status = GetStatus(stub.get());
  EXPECT_FALSE(status.serving());
  ASSERT_EQ(status.datasets_size(), 2);
  EXPECT_EQ(status.datasets(0).state(), v1::DatasetStatus::SERVING);
  EXPECT_EQ(status.datasets(1).state(), v1::DatasetStatus::FAILED);
  EXPECT_FALSE(status.datasets(1).error().empty());
  // The dataset indexed before the failure is served; the broken one says why not.
  v1::RegisterResponse response;
  EXPECT_TRUE(Register(stub.get(), MakeRegister("a", 0, 1, 4), &response).ok());
  grpc::Status broken =
      Register(stub.get(), OnDataset(MakeRegister("b", 0, 1, 4), "broken"), &response);
  EXPECT_EQ(broken.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(broken.error_message(),
              HasSubstr("dataset 'broken': the server could not index its shards"));
  EXPECT_EQ(Health(channel), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
}

TEST(DatasetsToServeTest, RefusesDuplicatesBadNamesAndNoData) {
  server::ServerOptions options;
  EXPECT_THAT(std::string(server::DatasetsToServe(options).status().message()),
              HasSubstr("--shards DIR and/or --dataset NAME=DIR"));
  options.shards_dir = "/a";
  options.datasets = {{"default", "/b"}};
  EXPECT_THAT(std::string(server::DatasetsToServe(options).status().message()),
              HasSubstr("--shards DIR already serves as 'default'"));
  options.datasets = {{"va l", "/b"}};
  EXPECT_EQ(server::DatasetsToServe(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.datasets = {{"val", ""}};
  EXPECT_EQ(server::DatasetsToServe(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.datasets = {{"val", "/b"}, {"test", "/c"}};
  auto specs = server::DatasetsToServe(options);
  ASSERT_TRUE(specs.ok());
  ASSERT_EQ(specs->size(), 3u);
  EXPECT_EQ((*specs)[0].name, "default");
  EXPECT_EQ((*specs)[2].name, "test");
}

}  // namespace
}  // namespace shardcast::server_testing
