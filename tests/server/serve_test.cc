// In-process shardcast server on port 0, real gRPC clients on loopback: every rank
// receives exactly n batches, equal (pixels included) to what the data plane makes
// of the plan's samples; resume, padding, augmentation and concurrent jobs.
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>

#include <thread>

#include "tests/server/server_test_support.h"

namespace shardcast::server_testing {
namespace {

class ServeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::make_unique<TempDir>();
    MakeDataset(dir_->path(), /*samples=*/300, /*per_shard=*/75);  // 4 shards
    server::ServerOptions options;
    options.reflection = true;  // HealthAndReflectionAnswer (off by default: --reflection)
    server_ = std::make_unique<InProcessServer>(dir_->path(), options);
    reference_ = std::make_unique<Reference>(dir_->path());
  }
  v1::Shardcast::Stub* stub() { return server_->stub(); }

  // Registers every rank of a job and streams each rank's epoch in its own thread;
  // checks every batch against the reference.
  void ServeJobAndCompare(const std::vector<v1::RegisterRequest>& ranks, int64_t epoch) {
    std::vector<v1::RegisterResponse> responses(ranks.size());
    for (size_t r = 0; r < ranks.size(); ++r) {
      grpc::Status status = Register(stub(), ranks[r], &responses[r]);
      ASSERT_TRUE(status.ok()) << status.error_message();
    }
    std::vector<StreamResult> results(ranks.size());
    std::vector<std::thread> threads;
    for (size_t r = 0; r < ranks.size(); ++r) {
      threads.emplace_back(
          [&, r] { results[r] = StreamAll(stub(), ranks[r].job_id(), ranks[r].rank(), epoch, 0); });
    }
    for (auto& t : threads) t.join();
    for (size_t r = 0; r < ranks.size(); ++r) {
      SCOPED_TRACE(absl::StrCat("job ", ranks[r].job_id(), " rank ", r));
      ASSERT_TRUE(results[r].status.ok()) << results[r].status.error_message();
      const auto planned =
          reference_->Plan(responses[r], ranks[r].world_size(), ranks[r].rank(), epoch);
      ASSERT_EQ(static_cast<int64_t>(planned.size()), responses[r].batches_per_epoch());
      ASSERT_EQ(results[r].batches.size(), planned.size());
      for (size_t b = 0; b < planned.size(); ++b) {
        reference_->ExpectBatch(results[r].batches[b], planned[b], Reference::Spec(responses[r]));
      }
    }
  }

  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<InProcessServer> server_;
  std::unique_ptr<Reference> reference_;
};

TEST_F(ServeTest, RegisterReportsTheJob) {
  v1::RegisterResponse response;
  ASSERT_TRUE(Register(stub(), MakeRegister("job", 1, 2, 8), &response).ok());
  EXPECT_EQ(response.batches_per_epoch(), 300 / (8 * 2));
  EXPECT_EQ(response.num_samples(), 300);
  EXPECT_EQ(response.num_classes(), 5);
  ASSERT_EQ(response.class_names_size(), 5);
  EXPECT_EQ(response.class_names(2), "class_002");
  ASSERT_EQ(response.image_shape_size(), 3);
  EXPECT_EQ(response.image_shape(0), 3);
  EXPECT_EQ(response.image_shape(1), 40);
  EXPECT_EQ(response.image_shape(2), 40);
  EXPECT_EQ(response.batch_size(), 8);
  EXPECT_EQ(response.split(), v1::SPLIT_SAMPLE);
  EXPECT_EQ(response.seed(), 11u);
  EXPECT_EQ(response.index_fingerprint(), reference_->index().fingerprint);
  EXPECT_FALSE(response.job_fingerprint().empty());
  EXPECT_FALSE(response.server_version().empty());
  EXPECT_EQ(response.shards_size(), 0);  // split sample reads every shard
  // A second rank of the same job sees the same plan.
  v1::RegisterResponse rank0;
  ASSERT_TRUE(Register(stub(), MakeRegister("job", 0, 2, 8), &rank0).ok());
  EXPECT_EQ(rank0.job_fingerprint(), response.job_fingerprint());
}

TEST_F(ServeTest, TwoRanksSplitSampleGetExactlyTheirPlannedBatches) {
  ServeJobAndCompare({MakeRegister("s", 0, 2, 8), MakeRegister("s", 1, 2, 8)}, /*epoch=*/0);
}

TEST_F(ServeTest, SplitShardWithWorkersAndShuffleLaterEpoch) {
  std::vector<v1::RegisterRequest> ranks;
  for (int r = 0; r < 2; ++r) {
    auto request = MakeRegister("shard-split", r, 2, 6, v1::SPLIT_SHARD);
    request.set_workers(2);
    request.set_shuffle_shards(true);
    ranks.push_back(request);
  }
  ServeJobAndCompare(ranks, /*epoch=*/3);
}

TEST_F(ServeTest, SplitShardRegisterListsTheRanksShards) {
  v1::RegisterResponse response;
  ASSERT_TRUE(Register(stub(), MakeRegister("shards", 1, 2, 8, v1::SPLIT_SHARD), &response).ok());
  // Unshuffled, rank 1 of 2 reads shards 1 and 3 (webdataset split_by_node).
  ASSERT_EQ(response.shards_size(), 2);
  EXPECT_EQ(response.shards(0), reference_->index().shards[1].path);
  EXPECT_EQ(response.shards(1), reference_->index().shards[3].path);
}

TEST_F(ServeTest, RandomTransformIsSeededPerSample) {
  auto request = MakeRegister("aug", 0, 1, 10);
  request.mutable_transform()->set_mode(v1::TRANSFORM_MODE_RANDOM);
  request.mutable_transform()->set_crop(32);
  ServeJobAndCompare({request}, /*epoch=*/2);
  // The same epoch again gives the same bytes; another epoch different ones.
  auto again = StreamAll(stub(), "aug", 0, 2, 0);
  auto first = StreamAll(stub(), "aug", 0, 2, 0);
  auto other = StreamAll(stub(), "aug", 0, 5, 0);
  ASSERT_TRUE(again.status.ok() && first.status.ok() && other.status.ok());
  ASSERT_EQ(again.batches.size(), first.batches.size());
  for (size_t b = 0; b < first.batches.size(); ++b) {
    EXPECT_EQ(again.batches[b].SerializeAsString(), first.batches[b].SerializeAsString());
  }
  EXPECT_NE(other.batches[0].images(), first.batches[0].images());
}

TEST_F(ServeTest, ResumeFromStartBatchIsTheSuffix) {
  v1::RegisterResponse response;
  ASSERT_TRUE(Register(stub(), MakeRegister("resume", 1, 2, 8), &response).ok());
  const int64_t n = response.batches_per_epoch();
  auto full = StreamAll(stub(), "resume", 1, 4, 0);
  ASSERT_TRUE(full.status.ok());
  ASSERT_EQ(static_cast<int64_t>(full.batches.size()), n);
  for (int64_t k : {int64_t{1}, int64_t{7}, n - 1, n}) {
    SCOPED_TRACE(absl::StrCat("start_batch ", k));
    auto suffix = StreamAll(stub(), "resume", 1, 4, k);
    ASSERT_TRUE(suffix.status.ok()) << suffix.status.error_message();
    ASSERT_EQ(static_cast<int64_t>(suffix.batches.size()), n - k);
    for (int64_t i = 0; i < n - k; ++i) {
      EXPECT_EQ(suffix.batches[i].SerializeAsString(), full.batches[k + i].SerializeAsString());
    }
  }
}

TEST_F(ServeTest, RemainderPadSendsFlaggedPadding) {
  std::vector<v1::RegisterRequest> ranks;
  for (int r = 0; r < 2; ++r) {
    auto request = MakeRegister("pad", r, 2, 16);
    request.set_remainder(v1::REMAINDER_PAD);
    ranks.push_back(request);
  }
  ServeJobAndCompare(ranks, /*epoch=*/1);
  // 300 samples over 2 x 16: n = 10, and 20 padding entries in the last batches.
  auto rank1 = StreamAll(stub(), "pad", 1, 1, 0);
  ASSERT_EQ(rank1.batches.size(), 10u);
  int padding = 0;
  for (const auto& batch : StreamAll(stub(), "pad", 0, 1, 0).batches) {
    for (const auto& info : batch.samples()) padding += info.valid() ? 0 : 1;
  }
  for (const auto& batch : rank1.batches) {
    for (const auto& info : batch.samples()) padding += info.valid() ? 0 : 1;
  }
  EXPECT_EQ(padding, 2 * 16 * 10 - 300);
}

TEST_F(ServeTest, TwoJobsAtOnce) {
  auto a0 = MakeRegister("job-a", 0, 2, 8);
  auto a1 = MakeRegister("job-a", 1, 2, 8);
  auto b0 = MakeRegister("job-b", 0, 1, 5, v1::SPLIT_SHARD, 40, 32);
  std::thread a([&] { ServeJobAndCompare({a0, a1}, 0); });
  std::thread b([&] { ServeJobAndCompare({b0}, 1); });
  a.join();
  b.join();
  auto status = GetStatus(stub());
  ASSERT_EQ(status.jobs_size(), 2);
  EXPECT_EQ(status.jobs(0).job_id(), "job-a");
  EXPECT_EQ(status.jobs(0).ranks_size(), 2);
  EXPECT_EQ(status.jobs(1).job_id(), "job-b");
  EXPECT_EQ(status.jobs(1).batch_size(), 5);
  EXPECT_EQ(status.jobs(1).split(), v1::SPLIT_SHARD);
}

TEST_F(ServeTest, StatusReportsProgressAndCounters) {
  v1::RegisterResponse response;
  ASSERT_TRUE(Register(stub(), MakeRegister("status", 0, 2, 10), &response).ok());
  ASSERT_TRUE(Register(stub(), MakeRegister("status", 1, 2, 10), &response).ok());
  const int64_t n = response.batches_per_epoch();  // 15
  ASSERT_TRUE(StreamAll(stub(), "status", 0, 1, 0).status.ok());
  ASSERT_TRUE(StreamAll(stub(), "status", 1, 0, 3).status.ok());
  // The client sees the end of a stream before the server has closed it.
  auto status = WaitForStatus(stub(), [](const v1::GetStatusResponse& s) {
    return s.open_streams() == 0 && s.memory_in_use_bytes() == 0;
  });
  EXPECT_TRUE(status.serving());
  EXPECT_EQ(status.num_shards(), 4);
  EXPECT_EQ(status.num_samples(), 300);
  EXPECT_EQ(status.open_streams(), 0);
  EXPECT_EQ(status.decode_threads(), 2);
  EXPECT_EQ(status.images_served(), (n + n - 3) * 10);
  const int64_t batch_bytes = 10 * 3 * 40 * 40;
  EXPECT_GT(status.bytes_served(), (2 * n - 3) * batch_bytes);
  EXPECT_LT(status.bytes_served(), (2 * n - 3) * (batch_bytes + 2000));
  EXPECT_GT(status.images_per_second(), 0);
  EXPECT_GT(status.bytes_per_second(), 0);
  EXPECT_EQ(status.memory_in_use_bytes(), 0);
  EXPECT_GT(status.rss_bytes(), 0);
  EXPECT_GT(status.uptime_seconds(), 0);
  EXPECT_EQ(status.decode_errors(), 0);
  ASSERT_EQ(status.jobs_size(), 1);
  const auto& job = status.jobs(0);
  EXPECT_EQ(job.batches_per_epoch(), n);
  ASSERT_EQ(job.ranks_size(), 2);
  // Rank 0 finished epoch 1, rank 1 finished epoch 0: one epoch behind.
  EXPECT_EQ(job.ranks(0).epoch(), 1);
  EXPECT_EQ(job.ranks(0).next_batch(), n);
  EXPECT_EQ(job.ranks(0).lag_batches(), 0);
  EXPECT_EQ(job.ranks(0).batches_sent(), n);
  EXPECT_FALSE(job.ranks(0).streaming());
  EXPECT_EQ(job.ranks(1).epoch(), 0);
  EXPECT_EQ(job.ranks(1).next_batch(), n);
  EXPECT_EQ(job.ranks(1).lag_batches(), n);
  EXPECT_EQ(job.ranks(1).batches_sent(), n - 3);
}

TEST_F(ServeTest, HealthAndReflectionAnswer) {
  EXPECT_EQ(Health(server_->channel()), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(Health(server_->channel(), "shardcast.v1.Shardcast"),
            grpc::health::v1::HealthCheckResponse::SERVING);
  // What grpcurl does first: ServerReflectionInfo with list_services (field 7). The
  // messages are written by hand: the reflection protos are not compiled here.
  grpc::GenericStub generic(server_->channel());
  grpc::CompletionQueue cq;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto call = generic.PrepareCall(
      &context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  auto step = [&cq](intptr_t tag) {
    void* got = nullptr;
    bool ok = false;
    EXPECT_TRUE(cq.Next(&got, &ok));
    EXPECT_EQ(reinterpret_cast<intptr_t>(got), tag);
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(step(1));
  const std::string request("\x3a\x01*", 3);  // list_services: "*"
  grpc::Slice slice(request);
  grpc::ByteBuffer request_buffer(&slice, 1);
  call->Write(request_buffer, reinterpret_cast<void*>(2));
  ASSERT_TRUE(step(2));
  call->WritesDone(reinterpret_cast<void*>(3));
  ASSERT_TRUE(step(3));
  grpc::ByteBuffer response;
  call->Read(&response, reinterpret_cast<void*>(4));
  ASSERT_TRUE(step(4));
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  step(5);
  EXPECT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_NE(bytes.find("shardcast.v1.Shardcast"), std::string::npos);
  EXPECT_NE(bytes.find("grpc.health.v1.Health"), std::string::npos);
}

}  // namespace
}  // namespace shardcast::server_testing
