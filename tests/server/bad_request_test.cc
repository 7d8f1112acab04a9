// Every wrong request gets the right gRPC code and a message that says what was
// wrong: registration (fields, disagreeing ranks, data that cannot serve the job)
// and streams (unknown job, rank, epoch, start_batch), plus requests while indexing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

#include "server/serving/service_core.h"
#include "tests/server/server_test_support.h"

namespace shardcast::server_testing {
namespace {

using ::testing::HasSubstr;

class BadRequestTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    MakeDataset(dir_->path(), /*samples=*/120, /*per_shard=*/40);  // 3 shards
    server_ = new InProcessServer(dir_->path());
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
  }
  v1::Shardcast::Stub* stub() { return server_->stub(); }

  grpc::Status RegisterStatus(const v1::RegisterRequest& request) {
    v1::RegisterResponse response;
    return Register(stub(), request, &response);
  }
  grpc::Status StreamStatus(const std::string& job, int rank, int64_t epoch, int64_t start,
                            size_t* messages = nullptr) {
    StreamResult result = StreamAll(stub(), job, rank, epoch, start);
    if (messages != nullptr) *messages = result.batches.size();
    return result.status;
  }

  static TempDir* dir_;
  static InProcessServer* server_;
};
TempDir* BadRequestTest::dir_ = nullptr;
InProcessServer* BadRequestTest::server_ = nullptr;

TEST_F(BadRequestTest, RegisterRejectsBadFields) {
  struct Case {
    const char* what;
    v1::RegisterRequest request;
    const char* message;
  };
  std::vector<Case> cases;
  cases.push_back({"empty job id", MakeRegister("", 0, 1, 4), "job_id"});
  cases.push_back({"rank == world", MakeRegister("f", 2, 2, 4), "rank"});
  cases.push_back({"negative rank", MakeRegister("f", -1, 2, 4), "rank"});
  cases.push_back({"world 0", MakeRegister("f", 0, 0, 4), "world_size"});
  cases.push_back({"negative batch", MakeRegister("f", 0, 1, -3), "batch_size"});
  auto crop = MakeRegister("f", 0, 1, 4, v1::SPLIT_SAMPLE, 32, 40);
  cases.push_back({"resize < crop", crop, "transform.resize"});
  // Once accepted, then every sample failed the transform and was served grey.
  auto resize = MakeRegister("f", 0, 1, 4, v1::SPLIT_SAMPLE, 20000, 32);
  cases.push_back({"resize above the limit", resize, "transform.resize: 20000 is outside"});
  auto huge = MakeRegister("f", 0, 1, 4000, v1::SPLIT_SAMPLE, 1024, 1024);
  cases.push_back({"message too large", huge, "max message size"});
  auto workers = MakeRegister("f", 0, 1, 4);
  workers.set_workers(-1);
  cases.push_back({"negative workers", workers, "workers"});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    grpc::Status status = RegisterStatus(c.request);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr(c.message));
  }
  // None of them created a job.
  EXPECT_EQ(GetStatus(stub()).jobs_size(), 0);
}

TEST_F(BadRequestTest, RanksOfAJobMustAgreeFieldByField) {
  ASSERT_TRUE(RegisterStatus(MakeRegister("agree", 0, 2, 8)).ok());
  struct Case {
    v1::RegisterRequest request;
    const char* field;
  };
  std::vector<Case> cases;
  cases.push_back(
      {MakeRegister("agree", 1, 2, 16), "batch_size: job 'agree' has 8, rank 1 asked 16"});
  cases.push_back(
      {MakeRegister("agree", 1, 3, 8), "world_size: job 'agree' has 2, rank 1 asked 3"});
  cases.push_back(
      {MakeRegister("agree", 1, 2, 8, v1::SPLIT_SHARD), "split: job 'agree' has sample"});
  cases.push_back({MakeRegister("agree", 1, 2, 8, v1::SPLIT_SAMPLE, 48, 32), "transform.crop"});
  cases.push_back({MakeRegister("agree", 1, 2, 8, v1::SPLIT_SAMPLE, 64, 40), "transform.resize"});
  auto seed = MakeRegister("agree", 1, 2, 8);
  seed.set_seed(12);
  cases.push_back({seed, "seed: job 'agree' has 11, rank 1 asked 12"});
  auto mode = MakeRegister("agree", 1, 2, 8);
  mode.mutable_transform()->set_mode(v1::TRANSFORM_MODE_RANDOM);
  cases.push_back({mode, "transform.mode"});
  auto remainder = MakeRegister("agree", 1, 2, 8);
  remainder.set_remainder(v1::REMAINDER_PAD);
  cases.push_back({remainder, "remainder"});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.field);
    grpc::Status status = RegisterStatus(c.request);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(status.error_message(), HasSubstr(c.field));
  }
  // Agreeing ranks (and re-registration after a reconnect) are fine.
  EXPECT_TRUE(RegisterStatus(MakeRegister("agree", 1, 2, 8)).ok());
  EXPECT_TRUE(RegisterStatus(MakeRegister("agree", 0, 2, 8)).ok());
}

TEST_F(BadRequestTest, DataThatCannotServeTheJobIsRefusedWithThePlannersReason) {
  // 120 samples cannot fill one batch of 64 on each of 2 ranks.
  grpc::Status too_big = RegisterStatus(MakeRegister("big", 0, 2, 64));
  EXPECT_TRUE(too_big.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
              too_big.error_code() == grpc::StatusCode::INVALID_ARGUMENT)
      << too_big.error_code();
  EXPECT_THAT(too_big.error_message(), HasSubstr("job 'big'"));
  // Split shard needs at least one shard per rank: 3 shards, 4 ranks.
  grpc::Status shards = RegisterStatus(MakeRegister("few-shards", 0, 4, 2, v1::SPLIT_SHARD));
  EXPECT_TRUE(shards.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
              shards.error_code() == grpc::StatusCode::INVALID_ARGUMENT)
      << shards.error_code();
  EXPECT_THAT(shards.error_message(), HasSubstr("shard"));
  EXPECT_THAT(shards.error_message(), HasSubstr("job 'few-shards'"));
}

TEST_F(BadRequestTest, StreamRequestsAreChecked) {
  v1::RegisterResponse response;
  ASSERT_TRUE(Register(stub(), MakeRegister("stream", 0, 3, 4), &response).ok());
  const int64_t n = response.batches_per_epoch();  // 120 / 12 = 10
  ASSERT_EQ(n, 10);

  grpc::Status unknown = StreamStatus("no-such-job", 0, 0, 0);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(unknown.error_message(), HasSubstr("no-such-job"));

  grpc::Status rank = StreamStatus("stream", 3, 0, 0);
  EXPECT_EQ(rank.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(rank.error_message(), HasSubstr("world_size 3"));

  grpc::Status unregistered = StreamStatus("stream", 2, 0, 0);
  EXPECT_EQ(unregistered.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(unregistered.error_message(), HasSubstr("rank 2"));

  grpc::Status epoch = StreamStatus("stream", 0, -1, 0);
  EXPECT_EQ(epoch.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_THAT(epoch.error_message(), HasSubstr("epoch"));
  // An epoch past any training run would overflow the lag figures (epoch * n + batch).
  for (int64_t huge : {int64_t{1'000'000'001}, std::numeric_limits<int64_t>::max()}) {
    grpc::Status far = StreamStatus("stream", 0, huge, 0);
    EXPECT_EQ(far.error_code(), grpc::StatusCode::OUT_OF_RANGE) << huge;
    EXPECT_THAT(far.error_message(), HasSubstr("epoch: must be in [0, 1000000000]"));
  }
  EXPECT_TRUE(StreamStatus("stream", 0, 1'000'000'000, 0).ok());  // the largest allowed

  for (int64_t start : {int64_t{-1}, n + 1}) {
    grpc::Status status = StreamStatus("stream", 0, 0, start);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::OUT_OF_RANGE) << start;
    EXPECT_THAT(status.error_message(), HasSubstr("start_batch"));
  }
  // A stream whose job changed since its rank registered (another run took the id,
  // or the server restarted with other data or defaults) is refused.
  v1::StreamBatchesRequest changed;
  changed.set_job_id("stream");
  changed.set_rank(0);
  changed.set_job_fingerprint("00000000000000000000000000000000");
  StreamResult stale = StreamAll(stub(), changed);
  EXPECT_EQ(stale.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(stale.status.error_message(), HasSubstr("job_fingerprint"));
  EXPECT_TRUE(stale.batches.empty());
  // A hostile value (1 MiB) is refused the same way, without echoing it back.
  changed.set_job_fingerprint(std::string(1 << 20, 'z'));
  StreamResult huge = StreamAll(stub(), changed);
  EXPECT_EQ(huge.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(huge.status.error_message(), HasSubstr("a malformed value of 1048576 bytes"));
  EXPECT_LT(huge.status.error_message().size(), 1000u);
  changed.set_job_fingerprint(response.job_fingerprint());
  changed.set_start_batch(n - 1);
  StreamResult fresh = StreamAll(stub(), changed);
  EXPECT_TRUE(fresh.status.ok()) << fresh.status.error_message();
  EXPECT_EQ(fresh.batches.size(), 1u);

  // start_batch == n is a resume after the last batch: no message, then OK.
  size_t messages = 99;
  EXPECT_TRUE(StreamStatus("stream", 0, 0, n, &messages).ok());
  EXPECT_EQ(messages, 0u);
  // Refused streams leave nothing behind. (The last accepted stream's batch buffer is
  // released when gRPC lets go of it, which may be just after the stream closed.)
  auto status = WaitForStatus(stub(), [](const v1::GetStatusResponse& s) {
    return s.open_streams() == 0 && s.memory_in_use_bytes() == 0;
  });
  EXPECT_EQ(status.open_streams(), 0);
  EXPECT_EQ(status.memory_in_use_bytes(), 0);
}

// The elastic-resume offset and the dataset name come from the client: out-of-range
// offsets and hostile names are refused with a bounded message, and the server serves on.
TEST_F(BadRequestTest, HostileSampleOffsetsAndDatasetNamesAreRefused) {
  v1::RegisterResponse response;
  ASSERT_TRUE(Register(stub(), MakeRegister("offset", 0, 2, 4), &response).ok());
  for (int64_t offset : {int64_t{-1}, int64_t{121}, std::numeric_limits<int64_t>::max(),
                         std::numeric_limits<int64_t>::min()}) {
    v1::StreamBatchesRequest request;
    request.set_job_id("offset");
    request.set_rank(0);
    request.set_sample_offset(offset);
    StreamResult result = StreamAll(stub(), request);
    EXPECT_EQ(result.status.error_code(), grpc::StatusCode::OUT_OF_RANGE) << offset;
    EXPECT_THAT(result.status.error_message(), HasSubstr("sample_offset")) << offset;
    EXPECT_TRUE(result.batches.empty()) << offset;
  }
  v1::RegisterRequest named = MakeRegister("named", 0, 1, 4);
  named.set_dataset(std::string(1 << 20, 'd'));
  grpc::Status huge = RegisterStatus(named);
  EXPECT_EQ(huge.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(huge.error_message(), HasSubstr("is not served here; this server has: default"));
  EXPECT_LT(huge.error_message().size(), 2000u);
  // Not UTF-8: gRPC's proto3 parser refuses the request before the service sees it.
  named.set_dataset(std::string("caf\xe9\n", 6));
  EXPECT_FALSE(RegisterStatus(named).ok());
  // Still serving: an offset inside the epoch streams its share.
  v1::StreamBatchesRequest request;
  request.set_job_id("offset");
  request.set_rank(0);
  request.set_sample_offset(40);
  StreamResult rest = StreamAll(stub(), request);
  ASSERT_TRUE(rest.status.ok()) << rest.status.error_message();
  EXPECT_EQ(rest.batches.size(), 10u);  // (120 - 40) / (4 x 2)
}

TEST(ServiceStateTest, RequestsWhileIndexingAreUnavailable) {
  server::ServerOptions options;
  options.shards_dir = "/nonexistent";
  options.decode_threads = 1;
  server::ServiceCore service(options);  // no dataset loaded yet
  auto registered = service.Register(MakeRegister("j", 0, 1, 4), "ipv4:127.0.0.1");
  EXPECT_EQ(registered.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(registered.status().message()), HasSubstr("indexing"));
  v1::StreamBatchesRequest stream;
  stream.set_job_id("j");
  absl::Status opened;
  EXPECT_EQ(service.OpenStream(stream,
                               [&](absl::StatusOr<std::unique_ptr<server::StreamSession>> session) {
                                 opened = session.status();
                               }),
            nullptr);  // refused at once, not waiting
  EXPECT_EQ(opened.code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(service.GetStatus().serving());
}

TEST(ServiceStateTest, ShardsThatCannotBeIndexedKeepTheServerUnavailable) {
  TempDir empty;
  server::ServerOptions options;
  options.shards_dir = empty.path();  // no shard in it
  options.listen_address = "127.0.0.1:0";
  options.decode_threads = 1;
  server::Daemon server(options);
  ASSERT_TRUE(server.Start().ok());
  EXPECT_FALSE(server.WaitUntilReady().ok());
  auto channel = MakeChannel(absl::StrCat("127.0.0.1:", server.port()));
  EXPECT_EQ(Health(channel), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  auto stub = v1::Shardcast::NewStub(channel);
  v1::RegisterResponse response;
  grpc::Status status = Register(stub.get(), MakeRegister("j", 0, 1, 4), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("could not index"));
}

TEST(ServiceStateTest, AnAddressThatCannotBeBoundIsAStartError) {
  TempDir dir;
  server::ServerOptions options;
  options.shards_dir = dir.path();
  options.listen_address = "300.1.2.3:1";  // no such IPv4 address
  options.decode_threads = 1;
  server::Daemon server(options);
  absl::Status started = server.Start();
  EXPECT_EQ(started.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(started.message()), HasSubstr("300.1.2.3:1"));
}

}  // namespace
}  // namespace shardcast::server_testing
