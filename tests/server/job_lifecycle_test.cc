// Jobs expire: once none of a job's ranks has had a stream open for --job-ttl, the job
// is dropped (logged, gone from status) and its id takes a new config. Before, a job
// lived until the server restarted, so rerunning with another batch size under the same
// id was refused with FAILED_PRECONDITION forever.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/rpc/grpc_adapter.h"
#include "tests/server/fake_clock.h"
#include "tests/server/server_test_support.h"

namespace shardcast::server_testing {
namespace {

using ::testing::HasSubstr;

// The server's clock is the test's: an hour passes when the test says so.
constexpr absl::Duration kTtl = absl::Hours(1);

server::ServerOptions WithTtl(const FakeClock& clock) {
  server::ServerOptions options;
  options.job_ttl = kTtl;
  options.clock = &clock;
  return options;
}

TEST(JobLifecycleTest, AnIdleJobExpiresAndItsIdTakesANewConfig) {
  TempDir dir;
  MakeDataset(dir.path(), /*samples=*/48, /*per_shard=*/12);
  FakeClock clock;
  InProcessServer server(dir.path(), WithTtl(clock));
  v1::RegisterResponse response;
  ASSERT_TRUE(Register(server.stub(), MakeRegister("rerun", 0, 1, 8), &response).ok());
  ASSERT_TRUE(StreamAll(server.stub(), "rerun", 0, 0, 0).status.ok());
  // The TTL counts from the stream's close on the server, which may follow the
  // client's end of the call by a moment.
  ASSERT_EQ(WaitForStatus(server.stub(),
                          [](const v1::GetStatusResponse& s) { return s.open_streams() == 0; })
                .open_streams(),
            0);

  // Within the TTL the job is alive: another batch size is refused, naming the field.
  grpc::Status conflict = Register(server.stub(), MakeRegister("rerun", 0, 1, 4), &response);
  EXPECT_EQ(conflict.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(conflict.error_message(), HasSubstr("batch_size"));

  clock.Advance(kTtl - absl::Seconds(1));
  EXPECT_EQ(GetStatus(server.stub()).jobs_size(), 1);  // not yet
  clock.Advance(absl::Seconds(2));
  EXPECT_EQ(GetStatus(server.stub()).jobs_size(), 0);  // expired
  grpc::Status rerun = Register(server.stub(), MakeRegister("rerun", 0, 1, 4), &response);
  ASSERT_TRUE(rerun.ok()) << rerun.error_message();
  EXPECT_EQ(response.batch_size(), 4);
  EXPECT_EQ(response.batches_per_epoch(), 48 / 4);
}

TEST(JobLifecycleTest, AJobWithAnOpenStreamNeverExpires) {
  TempDir dir;
  MakeDataset(dir.path(), /*samples=*/480, /*per_shard=*/120);
  FakeClock clock;
  server::ServerOptions options = WithTtl(clock);
  options.stream_idle_timeout = absl::ZeroDuration();  // the stream stays open, however idle
  InProcessServer server(dir.path(), options);
  v1::RegisterResponse response;
  ASSERT_TRUE(Register(server.stub(), MakeRegister("slow", 0, 1, 8), &response).ok());
  // A reader that takes one batch, then nothing for longer than the TTL.
  auto slow_stub =
      v1::Shardcast::NewStub(MakeChannel(server.target(), /*stream_window_bytes=*/64 * 1024));
  grpc::ClientContext context;
  v1::StreamBatchesRequest request;
  request.set_job_id("slow");
  request.set_rank(0);
  auto reader = slow_stub->StreamBatches(&context, request);
  v1::Batch batch;
  ASSERT_TRUE(reader->Read(&batch));
  clock.Advance(kTtl * 2);
  v1::GetStatusResponse status = GetStatus(server.stub());
  ASSERT_EQ(status.jobs_size(), 1);
  EXPECT_EQ(status.jobs(0).job_id(), "slow");
  context.TryCancel();
  reader->Finish();
}

// Squatting (issue 29): a stranger's registrations that never stream filled the job
// table up to --max-jobs and every new job was refused for --job-ttl (an hour). Such
// jobs now go after --unstreamed-job-ttl; a job that streamed keeps the long TTL.
TEST(JobLifecycleTest, JobsThatNeverStreamFreeTheTableAfterTheUnstreamedTtl) {
  TempDir dir;
  MakeDataset(dir.path(), /*samples=*/48, /*per_shard=*/12);
  FakeClock clock;
  server::ServerOptions options;
  options.job_ttl = absl::Hours(1);
  options.unstreamed_job_ttl = absl::Minutes(2);
  options.max_jobs = 2;
  options.clock = &clock;
  InProcessServer server(dir.path(), options);
  v1::RegisterResponse response;
  ASSERT_TRUE(Register(server.stub(), MakeRegister("real", 0, 1, 8), &response).ok());
  ASSERT_TRUE(StreamAll(server.stub(), "real", 0, 0, 0).status.ok());
  ASSERT_TRUE(Register(server.stub(), MakeRegister("squat", 0, 1, 8), &response).ok());
  grpc::Status full = Register(server.stub(), MakeRegister("new", 0, 1, 8), &response);
  EXPECT_EQ(full.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << full.error_message();

  clock.Advance(absl::Minutes(2) + absl::Seconds(1));
  v1::GetStatusResponse status = GetStatus(server.stub());
  ASSERT_EQ(status.jobs_size(), 1);  // the squatter went, the job that streamed stays
  EXPECT_EQ(status.jobs(0).job_id(), "real");
  grpc::Status admitted = Register(server.stub(), MakeRegister("new", 0, 1, 8), &response);
  EXPECT_TRUE(admitted.ok()) << admitted.error_message();
}

TEST(JobLifecycleTest, APeerIsItsAddressWithoutThePort) {
  EXPECT_EQ(server::PeerHost("ipv4:10.0.0.5:41234"), "ipv4:10.0.0.5");
  EXPECT_EQ(server::PeerHost("ipv6:[::1]:41234"), "ipv6:[::1]");
  EXPECT_EQ(server::PeerHost("ipv6:%5B2001:db8::7%5D:5"), "ipv6:[2001:db8::7]");
  // Every unix-socket client is the one local peer, named or not.
  EXPECT_EQ(server::PeerHost("unix:"), "unix");
  EXPECT_EQ(server::PeerHost("unix:/run/shardcast/client.sock"), "unix");
  EXPECT_EQ(server::PeerHost("unix-abstract:x"), "unix");
  // Without a port, or of another kind: as it is.
  EXPECT_EQ(server::PeerHost("ipv6:[::1]"), "ipv6:[::1]");
  EXPECT_EQ(server::PeerHost("ipv4:10.0.0.5"), "ipv4:10.0.0.5");
  EXPECT_EQ(server::PeerHost("vsock:3:50051"), "vsock:3:50051");
}

// Squatting per peer (issue 29): with a token-less server, one host registering jobs
// that never stream held --max-jobs places (every place) for --unstreamed-job-ttl. Now
// it holds at most --max-unstreamed-jobs-per-peer of them; other peers, the other
// ranks of its jobs and its jobs that stream are not held back.
TEST(JobLifecycleTest, OnePeerHoldsAtMostItsLimitOfJobsThatNeverStreamed) {
  TempDir dir;
  MakeDataset(dir.path(), /*samples=*/48, /*per_shard=*/12);
  server::ServerOptions options;
  options.max_unstreamed_jobs_per_peer = 2;
  InProcessServer server(dir.path(), options);
  v1::RegisterResponse response;
  ASSERT_TRUE(Register(server.stub(), MakeRegister("a", 0, 2, 8), &response).ok());
  ASSERT_TRUE(Register(server.stub(), MakeRegister("b", 0, 1, 8), &response).ok());

  // The third new job of this peer (127.0.0.1) is refused, naming the limit.
  grpc::Status refused = Register(server.stub(), MakeRegister("c", 0, 1, 8), &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_THAT(refused.error_message(), HasSubstr("--max-unstreamed-jobs-per-peer 2"));
  EXPECT_THAT(refused.error_message(), HasSubstr("peer ipv4:127.0.0.1 "));
  EXPECT_THAT(refused.error_message(), HasSubstr("'c'"));

  // Another rank of a job already registered joins it: not a new job.
  grpc::Status joined = Register(server.stub(), MakeRegister("a", 1, 2, 8), &response);
  EXPECT_TRUE(joined.ok()) << joined.error_message();

  // Another peer still registers (the gRPC layer passes PeerHost(peer()) in the same way).
  absl::StatusOr<v1::RegisterResponse> other =
      server.server().impl().Register(MakeRegister("c", 0, 1, 8), "ipv4:10.0.0.5");
  EXPECT_TRUE(other.ok()) << other.status();

  // A job of the peer that streamed no longer counts: one new job fits again.
  ASSERT_TRUE(StreamAll(server.stub(), "b", 0, 0, 0).status.ok());
  grpc::Status after_stream = Register(server.stub(), MakeRegister("d", 0, 1, 8), &response);
  EXPECT_TRUE(after_stream.ok()) << after_stream.error_message();
  grpc::Status full_again = Register(server.stub(), MakeRegister("e", 0, 1, 8), &response);
  EXPECT_EQ(full_again.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << full_again.error_message();
  EXPECT_EQ(GetStatus(server.stub()).total_jobs(), 4);  // a, b, c, d
}

}  // namespace
}  // namespace shardcast::server_testing
