// shardcast-server as a real child process: prints its port, applies its flag
// defaults, serves the same bytes as the data plane, answers health checks, and
// drains on SIGTERM (NOT_SERVING, streams finish or are cancelled, exit 0).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <thread>

#include "tests/server/server_test_support.h"
#include "tests/support/help_check.h"

namespace shardcast::server_testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using HealthStatus = grpc::health::v1::HealthCheckResponse;

// Runs the binary to completion; returns its exit code and stdout.
int RunServerBinary(const std::vector<std::string>& args, std::string* out) {
  std::vector<std::string> argv = {testing_util::BinaryPath("server/shardcast-server")};
  argv.insert(argv.end(), args.begin(), args.end());
  testing_util::CommandOutput result =
      testing_util::RunShellCapture(testing_util::ShellCommand(argv) + " 2>/dev/null");
  out->append(result.out);
  return result.exit_code;
}

class ServerProcessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    MakeDataset(dir_->path() + "/data", /*samples=*/160, /*per_shard=*/40);  // 4 shards
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string data() { return dir_->path() + "/data"; }
  static std::string log() { return dir_->path() + "/server.log"; }

  static TempDir* dir_;
};
TempDir* ServerProcessTest::dir_ = nullptr;

TEST_F(ServerProcessTest, ServesWithItsFlagDefaults) {
  ChildServer child({"--shards", data(), "--listen", "127.0.0.1:0", "--batch-size", "6", "--resize",
                     "36", "--crop", "32", "--split", "sample", "--seed", "5", "--decode-threads",
                     "2", "--prefetch", "2"},
                    log());
  ASSERT_GT(child.port(), 0) << "first stdout line: '" << child.first_line() << "'";
  EXPECT_EQ(child.first_line(),
            absl::StrCat("shardcast-server listening on 127.0.0.1:", child.port()));
  auto channel = MakeChannel(child.target());
  auto stub = v1::Shardcast::NewStub(channel);
  // Serving once indexed (the index of 4 small shards takes milliseconds).
  auto status =
      WaitForStatus(stub.get(), [](const v1::GetStatusResponse& s) { return s.serving(); });
  ASSERT_TRUE(status.serving());
  EXPECT_EQ(status.decode_threads(), 2);
  EXPECT_EQ(Health(channel), HealthStatus::SERVING);
  EXPECT_EQ(Health(channel, "shardcast.v1.Shardcast"), HealthStatus::SERVING);

  // A request that leaves everything to the server gets the flags' defaults.
  Reference reference(data());
  std::vector<v1::RegisterResponse> jobs(2);
  for (int rank = 0; rank < 2; ++rank) {
    v1::RegisterRequest request;
    request.set_job_id("defaults");
    request.set_rank(rank);
    request.set_world_size(2);
    ASSERT_TRUE(Register(stub.get(), request, &jobs[rank]).ok());
  }
  EXPECT_EQ(jobs[0].batch_size(), 6);
  EXPECT_EQ(jobs[0].split(), v1::SPLIT_SAMPLE);
  EXPECT_EQ(jobs[0].seed(), 5u);
  EXPECT_EQ(jobs[0].transform().resize(), 36);
  EXPECT_EQ(jobs[0].transform().crop(), 32);
  EXPECT_EQ(jobs[0].batches_per_epoch(), 160 / 12);
  for (int rank = 0; rank < 2; ++rank) {
    StreamResult result = StreamAll(stub.get(), "defaults", rank, 1, 0);
    ASSERT_TRUE(result.status.ok()) << result.status.error_message();
    const auto planned = reference.Plan(jobs[rank], 2, rank, 1);
    ASSERT_EQ(result.batches.size(), planned.size());
    for (size_t b = 0; b < planned.size(); ++b) {
      reference.ExpectBatch(result.batches[b], planned[b], Reference::Spec(jobs[rank]));
    }
  }
  kill(child.pid(), SIGINT);
  EXPECT_EQ(child.WaitExit(20), 0);
  const std::string logged = ReadWholeFile(log());
  EXPECT_THAT(logged, HasSubstr(" I register: job 'defaults' rank 1/2"));
  EXPECT_THAT(logged, HasSubstr(" I stream: opened job 'defaults' rank 0 epoch 1"));
  EXPECT_THAT(logged, HasSubstr("draining"));
}

// --dct-scaling is the server's choice for every job: off (the default), the served
// pixels are those of the full-size decode; on, images far above the crop size are
// decoded at a reduced DCT scale, which gives other pixels and another job fingerprint.
TEST_F(ServerProcessTest, DctScalingFlagChangesHowEveryJobDecodes) {
  TempDir big;
  MakeDataset(big.path() + "/data", /*samples=*/8, /*per_shard=*/8, /*size=*/256);
  Reference reference(big.path() + "/data");
  std::vector<std::string> fingerprints;
  std::vector<std::string> served;
  for (bool dct : {false, true}) {
    std::vector<std::string> args = {"--shards",       big.path() + "/data", "--listen=127.0.0.1:0",
                                     "--batch-size=8", "--resize=36",        "--crop=32",
                                     "--split=sample"};
    if (dct) args.push_back("--dct-scaling");
    ChildServer child(args, log());
    ASSERT_GT(child.port(), 0) << child.first_line();
    auto stub = v1::Shardcast::NewStub(MakeChannel(child.target()));
    ASSERT_TRUE(WaitForStatus(stub.get(), [](const v1::GetStatusResponse& s) {
                  return s.serving();
                }).serving());
    v1::RegisterResponse job;
    ASSERT_TRUE(
        Register(stub.get(), MakeRegister("dct", 0, 1, 0, v1::SPLIT_UNSPECIFIED, 0, 0), &job).ok());
    StreamResult result = StreamAll(stub.get(), "dct", 0, 0, 0);
    ASSERT_TRUE(result.status.ok()) << result.status.error_message();
    ASSERT_EQ(result.batches.size(), 1u);
    TransformSpec spec = Reference::Spec(job);
    spec.dct_scaling = dct;
    const auto planned = reference.Plan(job, 1, 0, 0);
    reference.ExpectBatch(result.batches[0], planned[0], spec);
    fingerprints.push_back(job.job_fingerprint());
    served.push_back(result.batches[0].images());
    kill(child.pid(), SIGTERM);
    EXPECT_EQ(child.WaitExit(20), 0);
  }
  EXPECT_NE(fingerprints[0], fingerprints[1]);
  EXPECT_NE(served[0], served[1]);  // 256 px decoded at 1/4 for a 36 px resize
}

// --delivery is the default of the jobs that leave it unset: with encoded, a plain
// registration gets the images as stored (and the server's --dct-scaling to decode them
// alike); a job may still ask for server delivery, and one without images is served.
TEST_F(ServerProcessTest, DeliveryFlagIsTheDefaultOfJobsThatLeaveItUnset) {
  ChildServer child({"--shards", data(), "--listen=127.0.0.1:0", "--batch-size=4", "--resize=40",
                     "--crop=32", "--split=sample", "--delivery=encoded", "--dct-scaling"},
                    log());
  ASSERT_GT(child.port(), 0) << child.first_line();
  auto stub = v1::Shardcast::NewStub(MakeChannel(child.target()));
  ASSERT_TRUE(WaitForStatus(stub.get(), [](const v1::GetStatusResponse& s) {
                return s.serving();
              }).serving());
  v1::RegisterResponse job;
  ASSERT_TRUE(
      Register(stub.get(), MakeRegister("plain", 0, 1, 0, v1::SPLIT_UNSPECIFIED, 0, 0), &job).ok());
  EXPECT_EQ(job.delivery(), v1::IMAGE_DELIVERY_ENCODED);
  EXPECT_TRUE(job.transform().dct_scaling());
  StreamResult result = StreamAll(stub.get(), "plain", 0, 0, 0);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  ASSERT_FALSE(result.batches.empty());
  EXPECT_TRUE(result.batches[0].images().empty());
  EXPECT_FALSE(result.batches[0].samples(0).encoded().data().empty());
  EXPECT_EQ(result.batches[0].samples(0).encoded().output_size(), 32);

  v1::RegisterRequest pixels = MakeRegister("pixels", 0, 1, 0, v1::SPLIT_UNSPECIFIED, 0, 0);
  pixels.set_delivery(v1::IMAGE_DELIVERY_SERVER);
  ASSERT_TRUE(Register(stub.get(), pixels, &job).ok());
  EXPECT_EQ(job.delivery(), v1::IMAGE_DELIVERY_SERVER);
  v1::RegisterRequest labels = MakeRegister("labels", 0, 1, 0, v1::SPLIT_UNSPECIFIED, 0, 0);
  labels.set_image(false);
  labels.add_fields("cls");
  ASSERT_TRUE(Register(stub.get(), labels, &job).ok());
  EXPECT_EQ(job.delivery(), v1::IMAGE_DELIVERY_SERVER);
  kill(child.pid(), SIGTERM);
  EXPECT_EQ(child.WaitExit(20), 0);

  std::string out;
  EXPECT_EQ(RunServerBinary({"--shards", data(), "--delivery", "trainer"}, &out), 2);
}

TEST_F(ServerProcessTest, SigtermDrainsAndExitsZero) {
  ChildServer child({"--shards", data(), "--listen=127.0.0.1:0", "--batch-size=8", "--resize=64",
                     "--crop=64", "--split=sample", "--grace-period=2s", "--prefetch=2"},
                    log());
  ASSERT_GT(child.port(), 0) << child.first_line();
  auto channel = MakeChannel(child.target());
  auto stub = v1::Shardcast::NewStub(channel);
  ASSERT_TRUE(WaitForStatus(stub.get(), [](const v1::GetStatusResponse& s) {
                return s.serving();
              }).serving());
  v1::RegisterResponse job;
  ASSERT_TRUE(
      Register(stub.get(), MakeRegister("drain", 0, 1, 0, v1::SPLIT_UNSPECIFIED, 0, 0), &job).ok());
  ASSERT_EQ(job.batches_per_epoch(), 20);

  StalledStream stalled(child.target(), "drain");
  ASSERT_TRUE(stalled.read_first_batch());

  const auto signalled = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(child.pid(), SIGTERM), 0);
  // During the grace period: NOT_SERVING, and new work is refused.
  HealthStatus::ServingStatus health = HealthStatus::SERVING;
  for (int i = 0; i < 100 && health == HealthStatus::SERVING; ++i) {
    health = Health(channel);
    if (health == HealthStatus::SERVING) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(health, HealthStatus::NOT_SERVING);
  EXPECT_EQ(Health(channel, "shardcast.v1.Shardcast"), HealthStatus::NOT_SERVING);
  v1::RegisterResponse late;
  grpc::Status refused = Register(stub.get(), MakeRegister("late", 0, 1, 4), &late);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);

  // The stalled stream is cancelled once the grace period is over; the process exits 0.
  EXPECT_EQ(child.WaitExit(20), 0);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
  EXPECT_GE(took, 1.5);  // it waited for the stream...
  EXPECT_LT(took, 10);   // ...but not forever
  EXPECT_FALSE(stalled.Finish().ok());
  const std::string logged = ReadWholeFile(log());
  EXPECT_THAT(logged, HasSubstr("received Terminated; draining"));
  EXPECT_THAT(logged, HasSubstr("cancelling 1 open streams"));
  EXPECT_THAT(logged, HasSubstr("exit 0"));
}

TEST_F(ServerProcessTest, IndexCacheDirIsUsedOnTheNextStart) {
  TempDir cache;
  for (int run = 0; run < 2; ++run) {
    ChildServer child(
        {"--shards", data(), "--listen", "127.0.0.1:0", "--index-cache-dir", cache.path()}, log());
    ASSERT_GT(child.port(), 0);
    auto stub = v1::Shardcast::NewStub(MakeChannel(child.target()));
    auto status =
        WaitForStatus(stub.get(), [](const v1::GetStatusResponse& s) { return s.serving(); });
    EXPECT_EQ(status.num_samples(), 160);
    kill(child.pid(), SIGTERM);
    EXPECT_EQ(child.WaitExit(20), 0);
    const std::string logged = ReadWholeFile(log());
    if (run == 0) {
      EXPECT_THAT(logged, Not(HasSubstr("from cache")));
    } else {
      EXPECT_THAT(logged, HasSubstr("from cache"));
    }
  }
  EXPECT_FALSE(fs::is_empty(cache.path()));
}

TEST_F(ServerProcessTest, HelpDocumentsEveryFlag) {
  testing_util::ExpectHelpListsEveryFlag({testing_util::BinaryPath("server/shardcast-server")},
                                         {"--shards",
                                          "--dataset",
                                          "--listen",
                                          "--decode-threads",
                                          "--prefetch",
                                          "--index-cache-dir",
                                          "--s3-endpoint",
                                          "--s3-region",
                                          "--s3-profile",
                                          "--s3-path-style",
                                          "--remote-connections",
                                          "--remote-timeout",
                                          "--remote-ca-file",
                                          "--remote-insecure",
                                          "--remote-read-ahead",
                                          "--remote-read-ahead-memory",
                                          "--cache-dir",
                                          "--cache-size",
                                          "--label-field",
                                          "--gzip-index-memory",
                                          "--max-message-size",
                                          "--grace-period",
                                          "--max-batch-memory",
                                          "--stream-idle-timeout",
                                          "--max-jobs",
                                          "--metrics-listen",
                                          "--stall-warn",
                                          "--tls-cert",
                                          "--tls-key",
                                          "--tls-client-ca",
                                          "--auth-token-file",
                                          "--reflection",
                                          "--log-level",
                                          "--version",
                                          "--batch-size",
                                          "--split",
                                          "--remainder",
                                          "--workers",
                                          "--seed",
                                          "--shuffle",
                                          "--shuffle-shards",
                                          "--shuffle-buffer",
                                          "--block-size",
                                          "--transform",
                                          "--resize",
                                          "--crop",
                                          "--delivery",
                                          "--bench-only-resend-first-batch"});
  std::string out;
  EXPECT_EQ(RunServerBinary({"--version"}, &out), 0);
  EXPECT_THAT(out, HasSubstr("shardcast-server "));
  // The budget's default is shown with where it comes from.
  EXPECT_EQ(RunServerBinary({"--help"}, &out), 0);
  EXPECT_THAT(out, ::testing::ContainsRegex(
                       "default [0-9]+[KMGT]iB: half[[:space:]]+of[[:space:]]+[0-9.]+GiB"));
}

TEST_F(ServerProcessTest, BadCommandLinesAndUnreadableShardsFail) {
  std::string out;
  EXPECT_EQ(RunServerBinary({"--listen", "127.0.0.1:0"}, &out), 2);  // no --shards
  EXPECT_EQ(RunServerBinary({"--shards", data(), "--split", "diagonal"}, &out), 2);
  EXPECT_EQ(RunServerBinary({"--shards", data(), "--no-such-flag"}, &out), 2);
  EXPECT_EQ(RunServerBinary({"--shards", data(), "stray"}, &out), 2);
  EXPECT_EQ(RunServerBinary({"--shards", data(), "--grace-period", "soon"}, &out), 2);
  EXPECT_EQ(RunServerBinary({"--shards", data(), "--unstreamed-job-ttl", "-5s"}, &out), 2);
  EXPECT_EQ(RunServerBinary({"--shards", data(), "--unstreamed-job-ttl", "soon"}, &out), 2);
  EXPECT_EQ(RunServerBinary({"--shards", data(), "--max-message-size", "1KiB"}, &out), 2);
  EXPECT_EQ(RunServerBinary({"--shards", data(), "--max-batch-memory", "0"}, &out), 2);
  EXPECT_EQ(RunServerBinary({"--shards", data(), "--max-jobs", "-1"}, &out), 2);
  EXPECT_EQ(RunServerBinary({"--shards", data(), "--max-unstreamed-jobs-per-peer", "-1"}, &out), 2);
  // The host-fault flags: negative, non-numeric, out of range, empty.
  EXPECT_EQ(RunServerBinary({"--shards", data(), "--max-connections", "-1"}, &out), 2);
  EXPECT_EQ(
      RunServerBinary({"--shards", data(), "--max-connections", "99999999999999999999"}, &out), 2);
  EXPECT_EQ(RunServerBinary({"--shards", data(), "--max-connections-per-peer", "many"}, &out), 2);
  EXPECT_EQ(RunServerBinary({"--shards", data(), "--max-connections-per-peer", ""}, &out), 2);
  EXPECT_EQ(RunServerBinary({"--shards", data(), "--listener-probe-interval", "-1s"}, &out), 2);
  EXPECT_EQ(RunServerBinary({"--shards", data(), "--shard-read-retry", "soon"}, &out), 2);
  EXPECT_EQ(RunServerBinary({"--shards", data(), "--shard-read-retry", "-20s"}, &out), 2);
  EXPECT_EQ(RunServerBinary({"--shards", data(), "--admission-wait", "-1s"}, &out), 2);
  EXPECT_EQ(RunServerBinary({"--shards", data(), "--admission-wait", "soon"}, &out), 2);
  // Listen addresses: a port above 65535 (which the resolver would wrap modulo 2^16),
  // none, or not a number; on every listener.
  for (const char* flag : {"--listen", "--metrics-listen", "--health-listen"}) {
    SCOPED_TRACE(flag);
    for (const char* address : {"127.0.0.1:99999", "127.0.0.1", "127.0.0.1:http", "[::1]:-1"}) {
      EXPECT_EQ(RunServerBinary({"--shards", data(), flag, address}, &out), 2) << address;
    }
  }
  // Job defaults are validated as a job would be: center mode needs resize >= crop.
  EXPECT_EQ(RunServerBinary({"--shards", data(), "--resize", "100"}, &out), 2);
  // Datasets: NAME=DIR, valid names, no name twice ("default" is --shards; the
  // messages: datasets_test).
  EXPECT_EQ(RunServerBinary({"--shards", data(), "--dataset", "val"}, &out), 2);
  EXPECT_EQ(RunServerBinary({"--shards", data(), "--dataset", "v al=/x"}, &out), 2);
  EXPECT_EQ(RunServerBinary({"--shards", data(), "--dataset", "default=/x"}, &out), 2);
  // A directory without shards: the server starts listening, fails indexing, exits 1.
  TempDir empty;
  EXPECT_EQ(RunServerBinary({"--shards", empty.path(), "--listen", "127.0.0.1:0"}, &out), 1);
}

}  // namespace
}  // namespace shardcast::server_testing
