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
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tests/server/server_test_support.h"
#include "tests/support/child_process.h"
#include "tests/support/object_servers.h"
#include "tools/pack/tar_writer.h"

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

// file:///DIR: the same directory, read through the object-store path (listing,
// ranged reads pinned to size and mtime, read-ahead) instead of the local one.
TEST_F(RemoteServingTest, AFileUrlServesTheLocalBatchesThroughTheRemotePath) {
  InProcessServer remote("file://" + dir_.path(), Remote());
  EXPECT_EQ(TwoEpochs(remote, "job"), want_);
  const v1::GetStatusResponse status = GetStatus(remote.stub());
  EXPECT_EQ(status.datasets(0).index_fingerprint(), local_fingerprint_)
      << "the same content plans the same batches";
  EXPECT_GT(status.read_ahead_hits(), 0) << "it is the remote reader that read them";
  EXPECT_EQ(status.remote_requests(), 0) << "file:// reads with pread, not libcurl";
}

TEST_F(RemoteServingTest, ABrokenIndexFileNextToTheShardsIsIgnoredAndTheShardsScanned) {
  const std::string valid =
      SerializeIndexFile(BuildDatasetIndex(dir_.path(), {}).value(), {}).value();
  IndexOptions other_labels;
  other_labels.label_field = "other";
  for (const std::string& hostile :
       {valid.substr(0, valid.size() / 2), std::string("not an index at all"), std::string(),
        std::string(valid.size(), '\xff'),
        SerializeIndexFile(BuildDatasetIndex(dir_.path(), other_labels).value(), other_labels)
            .value()}) {
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
      SerializeIndexFile(BuildDatasetIndex(dir_.path(), {}).value(), {}).value();
  auto s3 = S3rverServer::Start();
  ASSERT_TRUE(s3.ok()) << s3.status();
  ASSERT_TRUE((*s3)->CreateBucket("data").ok());
  ASSERT_TRUE((*s3)->PutDirectory("data", "train/", dir_.path()).ok());
  ASSERT_TRUE((*s3)->Put("data", "train/shardcast-index.bin", index_file).ok());
  ASSERT_TRUE((*s3)->Put("data", "train/deeper/shard-000009.tar", "not listed").ok());
  TempDir cache;
  server::ServerOptions options = Remote(cache.path());
  options.remote.stores.s3.endpoint = (*s3)->endpoint();
  options.remote.stores.s3.region = "us-east-1";
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
  options.remote.stores.s3.endpoint = (*proxy)->url();
  {
    InProcessServer remote("s3://signed/d/", options);
    EXPECT_EQ(TwoEpochs(remote, "job"), want_);
  }
  EXPECT_EQ(*(*proxy)->Count("bad_signature"), 0);
  // A wrong secret is refused by the store, and the server says so.
  ::setenv("AWS_SECRET_ACCESS_KEY", "wrong", 1);
  server::Daemon refused([&] {
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
    server::Daemon server(options);
    absl::Status started = server.Start();
    absl::Status ready = started.ok() ? server.WaitUntilReady() : started;
    EXPECT_FALSE(ready.ok()) << c.url;
    EXPECT_THAT(std::string(ready.message()), HasSubstr(c.want)) << c.url;
  }
}

// A store that starts answering 403 (credentials expired), 404 (the object deleted) or
// a malformed 206 in the middle of an epoch: the store's fault, not the data's. The
// read is retried for --shard-read-retry, then the stream fails naming the object and
// the HTTP status; no sample is ever a substitute. (Before: every later sample of the
// object was a grey substitute and the stream ended OK; a 404 did not even count as a
// store failure.)
TEST_F(RemoteServingTest, StoreErrorsMidEpochFailTheStreamNamingTheObjectNeverSubstitutes) {
  auto nginx = NginxServer::Start(dir_.path());
  ASSERT_TRUE(nginx.ok()) << nginx.status();
  auto proxy = FaultProxy::Start((*nginx)->url());
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  server::ServerOptions options = Remote();
  options.read_ahead_batches = 0;  // each read when it is needed, after the fault is armed
  options.shard_read_retry = absl::Milliseconds(300);
  InProcessServer remote(absl::StrCat((*proxy)->url(), "/", kShardPattern), options);
  struct Case {
    std::string fault;
    std::string want;  // in the stream's error, besides the object
  };
  const std::vector<Case> cases = {
      {R"({"kind": "fail", "status": 403, "method": "GET", "match": "shard-000001"})", "403"},
      // From the third read of the object on: deleted in the middle of the epoch.
      {R"({"kind": "fail", "status": 404, "method": "GET", "match": "shard-000001", "skip": 2})",
       "404"},
      {R"({"kind": "bad_range", "method": "GET", "match": "shard-000001"})", "206"},
  };
  int64_t failures = GetStatus(remote.stub()).remote_failures();
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].fault);
    ASSERT_TRUE((*proxy)->ClearFaults().ok());
    ASSERT_TRUE((*proxy)->Arm(cases[i].fault).ok());
    const std::string job = absl::StrCat("job", i);
    RegisterJob(remote, job);
    grpc::Status status;
    std::vector<std::string> got = Epoch(remote, job, 0, 0, &status);
    // UNAVAILABLE, as a failing disk: the client's token and job are fine.
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr("shard-000001.tar"));
    EXPECT_THAT(status.error_message(), HasSubstr(cases[i].want));
    EXPECT_LT(got.size(), want_[0].size());
    for (size_t b = 0; b < got.size(); ++b) {
      EXPECT_TRUE(got[b] == want_[0][b]) << "batch " << b << " differs from the local one";
    }
    const v1::GetStatusResponse after = GetStatus(remote.stub());
    EXPECT_EQ(after.substitutions(), 0);
    EXPECT_GT(after.remote_failures(), failures) << "every failed request counts";
    failures = after.remote_failures();
  }
  // The store healthy again: the same server serves the whole epoch.
  ASSERT_TRUE((*proxy)->ClearFaults().ok());
  RegisterJob(remote, "healthy");
  EXPECT_EQ(Epoch(remote, "healthy", 0, 0), want_[0]);
  EXPECT_EQ(GetStatus(remote.stub()).substitutions(), 0);
}

// A .tar.gz shard is copied whole at serve time: a store that sends its body without
// a Content-Length and on past the listed size fails the copy at the first byte too
// many (never a buffer or a file growing with the store's bytes), the read is retried
// and the stream fails UNAVAILABLE naming the object; nothing is substituted. (Before:
// every byte was taken into the local copy.)
TEST_F(RemoteServingTest, AWholeObjectBodyLongerThanListedFailsTheStreamNotTheMemory) {
  TempDir gz;
  for (int i = 0; i < kSamples / kPerShard; ++i) {
    const std::string name = absl::StrFormat("shard-%06d.tar", i);
    ASSERT_EQ(testing_util::RunShell(
                  absl::StrCat("gzip -c ", testing_util::ShellQuote(dir_.path() + "/" + name),
                               " > ", testing_util::ShellQuote(gz.path() + "/" + name + ".gz"))),
              0);
  }
  auto nginx = NginxServer::Start(gz.path());
  ASSERT_TRUE(nginx.ok()) << nginx.status();
  auto proxy = FaultProxy::Start((*nginx)->url());
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  server::ServerOptions options = Remote();
  options.read_ahead_batches = 0;  // no copy made before the fault is armed
  options.shard_read_retry = absl::Milliseconds(300);
  InProcessServer remote(absl::StrCat((*proxy)->url(), "/shard-{000000..000003}.tar.gz"), options);
  ASSERT_TRUE((*proxy)
                  ->Arm(R"({"kind": "overlong", "method": "GET", "match": "shard-000001", )"
                        R"("extra_bytes": 67108864})")
                  .ok());
  RegisterJob(remote, "job");
  grpc::Status status;
  std::vector<std::string> got = Epoch(remote, "job", 0, 0, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("shard-000001.tar.gz"));
  EXPECT_THAT(status.error_message(), HasSubstr("past the end"));
  EXPECT_LT(got.size(), want_[0].size());
  EXPECT_GE(*(*proxy)->Count("overlong"), 1);
  const v1::GetStatusResponse after = GetStatus(remote.stub());
  EXPECT_EQ(after.substitutions(), 0);
  EXPECT_LT(after.remote_bytes(), int64_t{32} << 20) << "the copies stopped at the listed size";
  // The store healthy again: the whole epoch.
  ASSERT_TRUE((*proxy)->ClearFaults().ok());
  RegisterJob(remote, "again");
  got = Epoch(remote, "again", 0, 0, &status);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(got.size(), want_[0].size());
  EXPECT_EQ(GetStatus(remote.stub()).substitutions(), 0);
}

// A 0-byte image member in a remote shard is 0 bytes: no request, no open range read
// to the object's end, nothing cached under its key. The empty image is bad data, so
// it is substituted, and the epoch is served. (Before: every read of it fetched the
// rest of the object, here 4 MiB, each epoch.)
TEST_F(RemoteServingTest, AZeroByteImageMemberIsReadWithoutARequest) {
  // One shard of 8 samples, the first's image empty and a 4 MiB member behind it.
  TempDir source;
  MakeDataset(source.path(), 8, 8);
  const DatasetIndex source_index = BuildDatasetIndex(source.path(), {}).value();
  ASSERT_EQ(source_index.shards.size(), 1u);
  const ShardInfo& shard = source_index.shards[0];
  const std::string tar = testing_util::ReadWholeFile(source.path() + "/" + shard.path);
  TempDir served;
  auto writer = pack::TarWriter::Open(served.path() + "/shard-000000.tar");
  ASSERT_TRUE(writer.ok()) << writer.status();
  for (size_t i = 0; i < shard.samples.size(); ++i) {
    const SampleEntry& sample = shard.samples[i];
    for (size_t m = 0; m < sample.members.size(); ++m) {
      const MemberRef& member = sample.members[m];
      const bool emptied = i == 0 && m == sample.image_member;
      ASSERT_TRUE((*writer)
                      ->AddMember(absl::StrCat(sample.key, ".", member.ext),
                                  emptied ? "" : tar.substr(member.offset, member.size))
                      .ok());
    }
    if (i == 0) {
      ASSERT_TRUE((*writer)->AddMember(sample.key + ".pad", std::string(4 << 20, 'p')).ok());
    }
  }
  ASSERT_TRUE((*writer)->Close().ok());

  auto nginx = NginxServer::Start(served.path());
  ASSERT_TRUE(nginx.ok()) << nginx.status();
  server::ServerOptions options = Remote();
  options.read_ahead_batches = 0;  // one request per member read, to count them
  InProcessServer remote(absl::StrCat((*nginx)->url(), "/shard-000000.tar"), options);
  v1::RegisterResponse job;
  ASSERT_TRUE(Register(remote.stub(), MakeRegister("zero", 0, 1, 8), &job).ok());
  const v1::GetStatusResponse before = GetStatus(remote.stub());
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    StreamResult result = StreamAll(remote.stub(), "zero", 0, epoch, 0);
    ASSERT_TRUE(result.status.ok()) << result.status.error_message();
    ASSERT_EQ(result.batches.size(), 1u);
    int substituted = 0;
    for (const v1::SampleInfo& sample : result.batches[0].samples()) {
      substituted += sample.substituted() ? 1 : 0;
    }
    EXPECT_EQ(substituted, 1) << "the empty image, and only it";
  }
  const v1::GetStatusResponse after = GetStatus(remote.stub());
  EXPECT_EQ(after.remote_requests() - before.remote_requests(), 2 * 7)
      << "one request per non-empty image member and epoch";
  EXPECT_LT(after.remote_bytes() - before.remote_bytes(), 1 << 20) << "no read to the end";
  EXPECT_EQ(after.remote_failures(), 0);
}

// A shard that downloads slower than one --remote-timeout, steadily: indexing it
// (no index file: each shard streamed whole) takes several deadlines, and succeeds,
// since the deadline of a whole-object download bounds progress, not the download.
// (Before: the download failed at the deadline, the shard could not be indexed, and
// the server did not serve the dataset.)
TEST_F(RemoteServingTest, AShardSlowerThanTheRemoteTimeoutIsIndexed) {
  auto nginx = NginxServer::Start(dir_.path());
  ASSERT_TRUE(nginx.ok()) << nginx.status();
  auto proxy = FaultProxy::Start((*nginx)->url());
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  server::ServerOptions options = Remote();
  options.remote.fetch.request_deadline = absl::Seconds(1);
  // Each shard's download takes about 2.5 deadlines, at a rate well above the
  // low-speed limit (a trickle is another fault: cut and resumed).
  const int64_t shard_bytes =
      static_cast<int64_t>(fs::file_size(dir_.path() + "/shard-000000.tar"));
  const int64_t rate =
      std::max<int64_t>(shard_bytes * 2 / 5, 4 * options.remote.fetch.low_speed_bytes);
  ASSERT_TRUE((*proxy)
                  ->Arm(absl::StrCat(R"({"kind": "trickle", "method": "GET", "match": "shard-", )",
                                     R"("count": 4, "bytes_per_second": )", rate, "}"))
                  .ok());
  InProcessServer remote(absl::StrCat((*proxy)->url(), "/", kShardPattern), options);
  EXPECT_EQ(*(*proxy)->Count("trickled"), 4) << "each shard was streamed slowly";
  // Indexed whole: the same batches as from the local directory.
  EXPECT_EQ(GetStatus(remote.stub()).datasets(0).index_fingerprint(), local_fingerprint_);
  EXPECT_EQ(TwoEpochs(remote, "job"), want_);
  EXPECT_EQ(GetStatus(remote.stub()).remote_failures(), 0);
}

}  // namespace
}  // namespace shardcast::server_testing
