// Shards in object storage (issue 27), served by a real in-process server from real
// stores on loopback: nginx (HTTP ranges) and s3rver (S3), with tools/fault_proxy.py
// in front to cut bodies, answer 503 with Retry-After, trickle and check SigV4. Every
// batch equals, byte for byte, the batch the same server serves from the same shards
// in a local directory; a changed object fails its streams FAILED_PRECONDITION naming
// it; the second epoch with a disk cache reads nothing remote.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/server/server_test_support.h"
#include "tests/support/object_servers.h"

namespace shardcast::server_testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing_util::FaultProxy;
using testing_util::NginxServer;
using testing_util::S3rverServer;

constexpr int kWorld = 2;
constexpr int kBatch = 8;
constexpr int kSamples = 160;
constexpr int kPerShard = 40;  // 4 shards
constexpr char kShardPattern[] = "shard-{000000..000003}.tar";

// What a rank receives in an epoch, batch by batch: keys, labels and image bytes.
std::vector<std::string> Epoch(InProcessServer& server, const std::string& job, int rank,
                               int64_t epoch, grpc::Status* status = nullptr) {
  StreamResult result = StreamAll(server.stub(), job, rank, epoch, 0);
  if (status != nullptr) {
    *status = result.status;
  } else {
    EXPECT_TRUE(result.status.ok()) << result.status.error_message();
  }
  std::vector<std::string> out;
  for (const v1::Batch& batch : result.batches) {
    std::vector<std::string> keys;
    for (const v1::SampleInfo& sample : batch.samples()) keys.push_back(sample.key());
    out.push_back(absl::StrCat(batch.index(), " ", absl::StrJoin(keys, ","), " ",
                               absl::StrJoin(batch.labels(), ","), " ", batch.images()));
  }
  return out;
}

void RegisterJob(InProcessServer& server, const std::string& job) {
  for (int rank = 0; rank < kWorld; ++rank) {
    v1::RegisterResponse response;
    grpc::Status status =
        Register(server.stub(), MakeRegister(job, rank, kWorld, kBatch), &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
}

// Epochs 0 and 1 of both ranks.
std::vector<std::vector<std::string>> TwoEpochs(InProcessServer& server, const std::string& job) {
  RegisterJob(server, job);
  std::vector<std::vector<std::string>> out;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    for (int rank = 0; rank < kWorld; ++rank) out.push_back(Epoch(server, job, rank, epoch));
  }
  return out;
}

class RemoteServingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MakeDataset(dir_.path(), kSamples, kPerShard);
    fs::remove(dir_.path() + "/shardcast-index.bin");  // a scan, unless a test puts it back
    InProcessServer local(dir_.path());
    want_ = TwoEpochs(local, "job");
    local_fingerprint_ = GetStatus(local.stub()).datasets(0).index_fingerprint();
    ASSERT_EQ(want_[0].size(), static_cast<size_t>(kSamples / (kWorld * kBatch)));
  }

  static server::ServerOptions Remote(const std::string& cache_dir = "") {
    server::ServerOptions options;
    options.remote.fetch.first_backoff = absl::Milliseconds(20);
    options.remote.fetch.low_speed_time = absl::Seconds(1);
    options.remote.fetch.low_speed_bytes = 4096;
    options.remote.fetch.request_deadline = absl::Seconds(30);
    options.remote.cache_dir = cache_dir;
    return options;
  }

  TempDir dir_;
  std::vector<std::vector<std::string>> want_;
  std::string local_fingerprint_;
};

TEST_F(RemoteServingTest, HttpShardsInBraceNotationServeTheLocalBatches) {
  auto nginx = NginxServer::Start(dir_.path());
  ASSERT_TRUE(nginx.ok()) << nginx.status();
  InProcessServer remote(absl::StrCat((*nginx)->url(), "/", kShardPattern), Remote());
  EXPECT_EQ(TwoEpochs(remote, "job"), want_);
  const v1::GetStatusResponse status = GetStatus(remote.stub());
  EXPECT_EQ(status.datasets(0).index_fingerprint(), local_fingerprint_)
      << "the same content plans the same batches";
  EXPECT_GT(status.remote_requests(), 0);
  EXPECT_GT(status.read_ahead_hits(), 0) << "the plan's next batches were fetched ahead";
  EXPECT_EQ(status.remote_failures(), 0);
}

TEST_F(RemoteServingTest, ABrokenIndexFileNextToTheShardsIsIgnoredAndTheShardsScanned) {
  const std::string valid = SerializeIndexFile(BuildDatasetIndex(dir_.path(), {}).value(), {});
  IndexOptions other_labels;
  other_labels.label_field = "other";
  for (const std::string& hostile :
       {valid.substr(0, valid.size() / 2), std::string("not an index at all"), std::string(),
        std::string(valid.size(), '\xff'),
        SerializeIndexFile(BuildDatasetIndex(dir_.path(), other_labels).value(), other_labels)}) {
    { std::ofstream(dir_.path() + "/shardcast-index.bin", std::ios::binary) << hostile; }
    auto nginx = NginxServer::Start(dir_.path());
    ASSERT_TRUE(nginx.ok()) << nginx.status();
    InProcessServer remote(absl::StrCat((*nginx)->url(), "/", kShardPattern), Remote());
    const v1::GetStatusResponse indexed = GetStatus(remote.stub());
    ASSERT_EQ(indexed.datasets_size(), 1);
    EXPECT_EQ(indexed.datasets(0).index_fingerprint(), local_fingerprint_);
    // 4 HEADs, the index file, then each shard read once to scan it.
    EXPECT_EQ(indexed.remote_requests(), 4 + 1 + 4);
    EXPECT_EQ(TwoEpochs(remote, "job"), want_);
  }
}

TEST_F(RemoteServingTest, S3WithAnIndexFileAndADiskCacheReadsNothingRemoteInTheSecondEpoch) {
  InProcessServer local(dir_.path());
  const std::string index_file =
      SerializeIndexFile(BuildDatasetIndex(dir_.path(), {}).value(), {});
  auto s3 = S3rverServer::Start();
  ASSERT_TRUE(s3.ok()) << s3.status();
  ASSERT_TRUE((*s3)->CreateBucket("data").ok());
  ASSERT_TRUE((*s3)->PutDirectory("data", "train/", dir_.path()).ok());
  ASSERT_TRUE((*s3)->Put("data", "train/shardcast-index.bin", index_file).ok());
  ASSERT_TRUE((*s3)->Put("data", "train/deeper/shard-000009.tar", "not listed").ok());
  TempDir cache;
  server::ServerOptions options = Remote(cache.path());
  options.remote.s3.endpoint = (*s3)->endpoint();
  options.remote.s3.region = "us-east-1";
  ::setenv("AWS_ACCESS_KEY_ID", S3rverServer::kAccessKeyId, 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "any", 1);
  InProcessServer remote("s3://data/train", options);
  const v1::GetStatusResponse indexed = GetStatus(remote.stub());
  // The listing and the index file: no shard was read to index it.
  EXPECT_EQ(indexed.remote_requests(), 2);
  EXPECT_EQ(indexed.datasets(0).index_fingerprint(), local_fingerprint_);
  RegisterJob(remote, "job");
  for (int rank = 0; rank < kWorld; ++rank) EXPECT_EQ(Epoch(remote, "job", rank, 0), want_[rank]);
  const v1::GetStatusResponse cold = GetStatus(remote.stub());
  for (int rank = 0; rank < kWorld; ++rank) {
    EXPECT_EQ(Epoch(remote, "job", rank, 1), want_[kWorld + rank]);
  }
  const v1::GetStatusResponse warm = GetStatus(remote.stub());
  EXPECT_EQ(warm.remote_requests(), cold.remote_requests()) << "epoch 1 came from the cache";
  EXPECT_GE(warm.cache_hits() - cold.cache_hits(), kSamples);
  EXPECT_GT(warm.cache_bytes(), 0);
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
}

TEST_F(RemoteServingTest, CutBodies503sAndTricklesCostRetriesNotBytes) {
  auto nginx = NginxServer::Start(dir_.path());
  ASSERT_TRUE(nginx.ok()) << nginx.status();
  auto proxy = FaultProxy::Start((*nginx)->url());
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  InProcessServer remote(absl::StrCat((*proxy)->url(), "/", kShardPattern), Remote());
  ASSERT_TRUE((*proxy)->CutBody("shard-000001", /*after_bytes=*/500, /*count=*/3).ok());
  ASSERT_TRUE((*proxy)->FailWith("shard-000002", 503, /*retry_after_seconds=*/1, 2).ok());
  ASSERT_TRUE((*proxy)->FailWith("shard-000000", 500, /*retry_after_seconds=*/-1, 2).ok());
  ASSERT_TRUE((*proxy)->Trickle("shard-000003", /*bytes_per_second=*/1024, 1).ok());
  EXPECT_EQ(TwoEpochs(remote, "job"), want_);
  const v1::GetStatusResponse status = GetStatus(remote.stub());
  EXPECT_GE(status.remote_retries(), 3 + 2 + 2 + 1);
  EXPECT_EQ(status.remote_failures(), 0);
  EXPECT_EQ(*(*proxy)->Count("cut"), 3);
  EXPECT_EQ(*(*proxy)->Count("failed"), 4);
}

TEST_F(RemoteServingTest, AnObjectChangedUnderARunningJobFailsItsStreamsNamingIt) {
  TempDir served;
  for (const auto& entry : fs::directory_iterator(dir_.path())) {
    fs::copy(entry.path(), served.path() + "/" + entry.path().filename().string());
  }
  auto nginx = NginxServer::Start(served.path());
  ASSERT_TRUE(nginx.ok()) << nginx.status();
  server::ServerOptions options = Remote();
  options.read_ahead_batches = 0;  // nothing fetched before the change
  InProcessServer remote(absl::StrCat((*nginx)->url(), "/", kShardPattern), options);
  RegisterJob(remote, "job");
  // Rewritten in place: another file of the same name (nginx's ETag is its mtime and size).
  const std::string changed = served.path() + "/shard-000002.tar";
  std::string bytes = testing_util::ReadWholeFile(changed);
  bytes.append(512, '\0');
  { std::ofstream(changed, std::ios::binary | std::ios::trunc) << bytes; }
  grpc::Status status;
  std::vector<std::string> got = Epoch(remote, "job", 0, 0, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("shard-000002.tar"));
  EXPECT_LT(got.size(), want_[0].size());
  const v1::GetStatusResponse after = GetStatus(remote.stub());
  EXPECT_TRUE(after.serving()) << "the server keeps serving the other shards";
  EXPECT_EQ(after.total_changed_shards(), 1);
}

TEST_F(RemoteServingTest, SignedRequestsWithASessionTokenPassAStrictSigV4Check) {
  auto s3 = S3rverServer::Start();
  ASSERT_TRUE(s3.ok()) << s3.status();
  ASSERT_TRUE((*s3)->CreateBucket("signed").ok());
  ASSERT_TRUE((*s3)->PutDirectory("signed", "d/", dir_.path()).ok());
  auto proxy = FaultProxy::Start((*s3)->endpoint());
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  ASSERT_TRUE((*proxy)->VerifySigV4(S3rverServer::kAccessKeyId, "the-secret").ok());
  ::setenv("AWS_ACCESS_KEY_ID", S3rverServer::kAccessKeyId, 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "the-secret", 1);
  ::setenv("AWS_SESSION_TOKEN", "a-session-token", 1);
  server::ServerOptions options = Remote();
  options.remote.s3.endpoint = (*proxy)->url();
  {
    InProcessServer remote("s3://signed/d/", options);
    EXPECT_EQ(TwoEpochs(remote, "job"), want_);
  }
  EXPECT_EQ(*(*proxy)->Count("bad_signature"), 0);
  // A wrong secret is refused by the store, and the server says so.
  ::setenv("AWS_SECRET_ACCESS_KEY", "wrong", 1);
  server::ShardcastServer refused([&] {
    server::ServerOptions o = options;
    o.shards_dir = "s3://signed/d/";
    o.listen_address = "127.0.0.1:0";
    return o;
  }());
  absl::Status started = refused.Start();
  absl::Status ready = started.ok() ? refused.WaitUntilReady() : started;
  EXPECT_FALSE(ready.ok());
  EXPECT_THAT(std::string(ready.message()), HasSubstr("SignatureDoesNotMatch"));
  EXPECT_GE(*(*proxy)->Count("bad_signature"), 1);
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  ::unsetenv("AWS_SESSION_TOKEN");
}

// What the server is given for a remote dataset may be wrong in every way: each is a
// clear error naming what is wrong, from indexing, never a crash or a hang.
TEST_F(RemoteServingTest, BadUrlsAndSettingsAreClearErrors) {
  TempDir cache;
  struct Case {
    std::string url;
    std::string want;  // in the message
    int64_t cache_size = int64_t{1} << 30;
  };
  const std::vector<Case> cases = {
      {"gs://bucket/train/", "s3://"},
      {"s3://", "bucket"},
      {"ftp://host/shard.tar", "ftp"},
      {"http://127.0.0.1/d/", "/"},
      {"http://127.0.0.1/d/shard-{0..99999999}.tar", "URLs"},
      {"http://127.0.0.1/d/shard-{1..2.tar", "unbalanced '{'"},
      // Nothing listens on port 1: retried until the deadline, then named.
      {"http://127.0.0.1:1/shard-{0..1}.tar", "127.0.0.1:1"},
      {"http://127.0.0.1:1/shard-0.tar", "cache size", /*cache_size=*/0},
  };
  for (const Case& c : cases) {
    server::ServerOptions options = Remote(cache.path());
    options.remote.cache_size_bytes = c.cache_size;
    options.remote.fetch.request_deadline = absl::Seconds(1);
    options.shards_dir = c.url;
    options.listen_address = "127.0.0.1:0";
    server::ShardcastServer server(options);
    absl::Status started = server.Start();
    absl::Status ready = started.ok() ? server.WaitUntilReady() : started;
    EXPECT_FALSE(ready.ok()) << c.url;
    EXPECT_THAT(std::string(ready.message()), HasSubstr(c.want)) << c.url;
  }
}

}  // namespace
}  // namespace shardcast::server_testing
