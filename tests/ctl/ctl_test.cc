// shardcast-ctl against a real shardcast-server: both run as child processes on
// a small synthetic dataset (made by shardcast-pack), talking gRPC on loopback.
#include <arpa/inet.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/rpc/channel.h"
#include "shardcast/v1/shardcast.grpc.pb.h"
#include "tests/support/child_process.h"
#include "tests/support/server_process.h"
#include "tests/support/temp_dir.h"

namespace {

const std::string kServerBinary = SHARDCAST_BINARY_DIR "/server/shardcast-server";
const std::string kCtlBinary = SHARDCAST_BINARY_DIR "/client/shardcast-ctl";
const std::string kPackBinary = SHARDCAST_BINARY_DIR "/tools/shardcast-pack";

using RunResult = shardcast::testing_util::CommandOutput;

// Runs a command to completion and captures its stdout (stderr lands in the test log).
RunResult RunToEnd(const std::vector<std::string>& argv) {
  return shardcast::testing_util::RunShellCapture(shardcast::testing_util::ShellCommand(argv));
}

RunResult Ctl(std::vector<std::string> args) {
  args.insert(args.begin(), kCtlBinary);
  return RunToEnd(args);
}

// A bound socket that never listens: connections to its port are refused, and no
// other process can take the port while it is held. `address` is empty on failure.
struct RefusingAddress {
  RefusingAddress() {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (sock < 0 || bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return;
    }
    address = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));
  }
  ~RefusingAddress() {
    if (sock >= 0) close(sock);
  }
  RefusingAddress(const RefusingAddress&) = delete;
  RefusingAddress& operator=(const RefusingAddress&) = delete;
  const int sock = socket(AF_INET, SOCK_STREAM, 0);
  std::string address;
};

class CtlTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (const std::string& binary : {kServerBinary, kCtlBinary, kPackBinary}) {
      ASSERT_EQ(access(binary.c_str(), X_OK), 0) << binary << " is not built";
    }
    dir_ = new shardcast::testing_util::TempDir("ctl_test");
    const std::string shards = *dir_ / "shards";
    const RunResult pack = RunToEnd({kPackBinary, "--synthetic", "64", "--classes", "4", "--size",
                                     "32x32", "--per-shard", "16", "--quiet", shards});
    ASSERT_EQ(pack.exit_code, 0) << pack.out;

    // Start() returns once the first stdout line (the chosen port) is there, or fails
    // the suite after 60 s instead of the ctest timeout. stderr lands in the test log.
    server_ = new shardcast::testing_util::ServerChild();
    const absl::Status started =
        server_->Start({"--shards", shards, "--listen", "127.0.0.1:0", "--decode-threads", "1",
                        "--resize", "32", "--crop", "32", "--grace-period", "5s"},
                       *dir_ / "server.out", "");
    ASSERT_TRUE(started.ok()) << started;
    const std::string prefix = "shardcast-server listening on 127.0.0.1:";
    ASSERT_TRUE(absl::StartsWith(server_->first_line(), prefix)) << server_->first_line();
    address_ = new std::string(absl::StrCat("127.0.0.1:", server_->port()));

    // NOT_SERVING (exit 1) while indexing, then SERVING (exit 0).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    RunResult health;
    do {
      health = Ctl({"health", "--server", *address_, "--rpc-timeout", "2s"});
      if (health.exit_code == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    } while (std::chrono::steady_clock::now() < deadline);
    ASSERT_EQ(health.exit_code, 0) << health.out;
  }

  // A failed SetUpTestSuite does not stop the tests from running: stop each here.
  void SetUp() override { ASSERT_NE(address_, nullptr) << "the server did not start"; }

  static void TearDownTestSuite() {
    if (server_ != nullptr) server_->Kill(SIGKILL);
    delete server_;
    delete dir_;
    delete address_;
    server_ = nullptr;
    dir_ = nullptr;
    address_ = nullptr;
  }

  static shardcast::testing_util::TempDir* dir_;
  static std::string* address_;
  static shardcast::testing_util::ServerChild* server_;
};

shardcast::testing_util::TempDir* CtlTest::dir_ = nullptr;
std::string* CtlTest::address_ = nullptr;
shardcast::testing_util::ServerChild* CtlTest::server_ = nullptr;

TEST_F(CtlTest, HealthServing) {
  RunResult r = Ctl({"health", "--server", *address_});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "SERVING\n");
  r = Ctl({"health", "--server", *address_, "--service", "shardcast.v1.Shardcast"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "SERVING\n");
  r = Ctl({"health", "--server", *address_, "--service", ""});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "SERVING\n");
}

TEST_F(CtlTest, HealthUnknownServiceIsNotServing) {
  const RunResult r = Ctl({"health", "--server", *address_, "--service", "no.such.Service"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StartsWith(r.out, "SERVICE_UNKNOWN")) << r.out;
}

TEST_F(CtlTest, HealthUnreachableWhenNothingListens) {
  const RefusingAddress refusing;
  ASSERT_FALSE(refusing.address.empty());
  const std::string& dead = refusing.address;
  RunResult r = Ctl({"health", "--server", dead, "--rpc-timeout", "5s"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_TRUE(absl::StartsWith(r.out, "unreachable: " + dead + ": UNAVAILABLE")) << r.out;
  r = Ctl({"status", "--server", dead, "--rpc-timeout", "5s"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, "");
}

// --server with several replicas asks each; one line (or report) each, the exit code
// the worst answer. Here the live server beside a refusing address.
TEST_F(CtlTest, EveryReplicaOfAListIsAsked) {
  const RefusingAddress refusing;
  ASSERT_FALSE(refusing.address.empty());
  const std::string& dead = refusing.address;
  const std::string both = absl::StrCat(*address_, ",", dead);

  RunResult r = Ctl({"health", "--server", both, "--rpc-timeout", "5s"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_TRUE(absl::StartsWith(r.out, absl::StrCat(*address_, ": SERVING\n", dead,
                                                   ": unreachable: ", dead, ": UNAVAILABLE")))
      << r.out;
  r = Ctl({"health", "--server", absl::StrCat(*address_, ",", *address_)});  // one replica
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "SERVING\n");

  r = Ctl({"status", "--server", both, "--rpc-timeout", "5s"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_TRUE(absl::StrContains(r.out, absl::StrCat("server           ", *address_))) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, absl::StrCat("\n", dead, ": UNAVAILABLE"))) << r.out;

  r = Ctl({"status", "--server", both, "--json", "--rpc-timeout", "5s"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_TRUE(
      absl::StartsWith(r.out, absl::StrCat("[{\"server\": \"", *address_, "\", \"status\": {")))
      << r.out;
  EXPECT_TRUE(absl::EndsWith(r.out, "}]\n")) << r.out;
}

TEST_F(CtlTest, UsageErrors) {
  EXPECT_EQ(Ctl({"health"}).exit_code, 2);
  EXPECT_EQ(Ctl({"health", "--server", *address_, "--rpc-timeout", "x"}).exit_code, 2);
  EXPECT_EQ(Ctl({"health", "--server", *address_, "--rpc-timeout", "0"}).exit_code, 2);
  // The old spelling is gone: --timeout meant a call deadline here, a rendezvous
  // timeout in the trainer.
  EXPECT_EQ(Ctl({"health", "--server", *address_, "--timeout", "5"}).exit_code, 2);
  EXPECT_EQ(Ctl({"status", "--server", *address_, "--bogus"}).exit_code, 2);
  EXPECT_EQ(Ctl({"status", *address_}).exit_code, 2);
  EXPECT_EQ(Ctl({"no-such-command"}).exit_code, 2);
  const RunResult help = Ctl({"health", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(help.out, "3  unreachable")) << help.out;
}

// Registers both ranks of a job and streams rank 0's whole epoch 0 over gRPC,
// so the status has a job, ranks and served images to show.
TEST_F(CtlTest, StatusTableAndJson) {
  shardcast::client::ChannelOptions channel;
  channel.target = *address_;
  auto stub = shardcast::v1::Shardcast::NewStub(shardcast::client::MakeChannel(channel));
  int64_t batches_per_epoch = 0;
  for (int rank = 0; rank < 2; ++rank) {
    shardcast::v1::RegisterRequest req;
    req.set_job_id("ctl-test");
    req.set_rank(rank);
    req.set_world_size(2);
    req.set_batch_size(4);
    req.set_split(shardcast::v1::SPLIT_SAMPLE);
    shardcast::v1::RegisterResponse resp;
    grpc::ClientContext ctx;
    const grpc::Status s = stub->Register(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    batches_per_epoch = resp.batches_per_epoch();
  }
  ASSERT_EQ(batches_per_epoch, 64 / (4 * 2));
  {
    shardcast::v1::StreamBatchesRequest req;
    req.set_job_id("ctl-test");
    req.set_rank(0);
    grpc::ClientContext ctx;
    auto reader = stub->StreamBatches(&ctx, req);
    shardcast::v1::Batch batch;
    int received = 0;
    while (reader->Read(&batch)) ++received;
    const grpc::Status s = reader->Finish();
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(received, batches_per_epoch);
  }

  const RunResult table = Ctl({"status", "--server", *address_});
  ASSERT_EQ(table.exit_code, 0) << table.out;
  for (const std::string& expected : {
           std::string("server           ") + *address_ + "  (shardcast-server ",
           std::string("serving          yes (index serving)\n"),
           std::string("stall warning    0 stalled ranks, --stall-warn 2m00s\n"),
           std::string("connections      "),
           std::string(", listener accepting: yes\n"),
           std::string("shards dir       ") + dir_->path() + "/shards",
           std::string("shards/samples   4 / 64\n"),
           std::string("datasets (1):\n"
                       "  DATASET  STATE    SHARDS  SAMPLES  CLASSES  SKIPPED  DIR\n"
                       "  default  serving       4       64        4        0  ") +
               dir_->path() + "/shards\n",
           std::string("jobs (1):\n  JOB       DATASET  WORLD  BATCH  N  SPLIT   FINGERPRINT\n"),
           std::string("  ctl-test  default      2      4  8  sample  "),
           std::string("job ctl-test: 2 of 2 ranks registered\n"
                       "  RANK  EPOCH  NEXT / N  LAG  STREAMING  SENT  WINDOW  LAST BATCH  "
                       "STALLED\n"
                       "     0      0     8 / 8"),
       }) {
    EXPECT_TRUE(absl::StrContains(table.out, expected)) << "missing:\n"
                                                        << expected << "\nin:\n"
                                                        << table.out;
  }

  const RunResult json = Ctl({"status", "--server", *address_, "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.out;
  shardcast::v1::GetStatusResponse status;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &status).ok()) << json.out;
  EXPECT_TRUE(status.serving());
  EXPECT_EQ(status.num_shards(), 4);
  EXPECT_EQ(status.num_samples(), 64);
  EXPECT_GE(status.images_served(), batches_per_epoch * 4);
  EXPECT_GT(status.uptime_seconds(), 0);
  ASSERT_EQ(status.jobs_size(), 1);
  const shardcast::v1::JobStatus& job = status.jobs(0);
  EXPECT_EQ(job.job_id(), "ctl-test");
  EXPECT_EQ(job.world_size(), 2);
  EXPECT_EQ(job.batch_size(), 4);
  EXPECT_EQ(job.batches_per_epoch(), batches_per_epoch);
  ASSERT_EQ(job.ranks_size(), 2);
  for (const auto& rank : job.ranks()) {
    EXPECT_EQ(rank.batches_sent(), rank.rank() == 0 ? batches_per_epoch : 0) << rank.rank();
  }
  // Zero-valued fields are printed too (always_print_primitive_fields).
  EXPECT_TRUE(absl::StrContains(json.out, "\"decodeErrors\": \"0\"")) << json.out;
  EXPECT_EQ(status.index_state(), "serving");
  EXPECT_EQ(status.stall_warn_seconds(), 120);

  // --watch, stdout not a terminal: --count reports one after another, no screen clearing.
  const RunResult watch =
      Ctl({"status", "--server", *address_, "--watch", "--interval", "50ms", "--count", "3"});
  EXPECT_EQ(watch.exit_code, 0) << watch.out;
  size_t reports = 0;
  for (size_t at = 0; (at = watch.out.find("job ctl-test: 2 of 2", at)) != std::string::npos;
       ++at) {
    ++reports;
  }
  EXPECT_EQ(reports, 3u) << watch.out;
  EXPECT_TRUE(absl::StartsWith(watch.out, "shardcast-ctl status --watch: every ")) << watch.out;
  EXPECT_FALSE(absl::StrContains(watch.out, "\x1b[")) << watch.out;
  EXPECT_EQ(Ctl({"status", "--server", *address_, "--watch", "--json"}).exit_code, 2);
  EXPECT_EQ(Ctl({"status", "--server", *address_, "--watch", "--interval", "0s"}).exit_code, 2);
}

// Last in the file: SIGTERM with a stream open drains: health says NOT_SERVING
// (exit 1) and status "serving no" until the stream is gone; then the server
// exits 0 and health is unreachable (exit 3).
TEST_F(CtlTest, ZzDrainingIsNotServingThenUnreachable) {
  // Small HTTP/2 windows and 2.4 MB batches: the server cannot finish the stream
  // while this client reads nothing, so the drain waits for it.
  shardcast::client::ChannelOptions channel;
  channel.target = *address_;
  channel.stream_window_bytes = 64 * 1024;
  auto stub = shardcast::v1::Shardcast::NewStub(shardcast::client::MakeChannel(channel));
  shardcast::v1::RegisterRequest reg;
  reg.set_job_id("drain");
  reg.set_rank(0);
  reg.set_world_size(1);
  reg.set_batch_size(16);
  reg.mutable_transform()->set_mode(shardcast::v1::TRANSFORM_MODE_CENTER);
  reg.mutable_transform()->set_resize(256);
  reg.mutable_transform()->set_crop(224);
  shardcast::v1::RegisterResponse reg_resp;
  {
    grpc::ClientContext ctx;
    const grpc::Status s = stub->Register(&ctx, reg, &reg_resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  ASSERT_EQ(reg_resp.batches_per_epoch(), 4);
  shardcast::v1::StreamBatchesRequest req;
  req.set_job_id("drain");
  grpc::ClientContext stream_ctx;
  auto reader = stub->StreamBatches(&stream_ctx, req);
  shardcast::v1::Batch batch;
  ASSERT_TRUE(reader->Read(&batch));

  ASSERT_EQ(kill(server_->pid(), SIGTERM), 0);
  RunResult health;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  do {
    health = Ctl({"health", "--server", *address_, "--rpc-timeout", "1s"});
    if (health.exit_code != 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(health.exit_code, 1) << health.out;
  EXPECT_EQ(health.out, "NOT_SERVING\n");
  const RunResult status = Ctl({"status", "--server", *address_, "--rpc-timeout", "1s"});
  EXPECT_EQ(status.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(status.out, "serving          no (index draining)\n"))
      << status.out;

  stream_ctx.TryCancel();
  reader->Finish();
  const std::optional<int> wait_status = server_->WaitFor(std::chrono::seconds(60));
  ASSERT_TRUE(wait_status.has_value()) << "the server did not exit";
  EXPECT_TRUE(WIFEXITED(*wait_status) && WEXITSTATUS(*wait_status) == 0) << *wait_status;
  const RunResult r = Ctl({"health", "--server", *address_, "--rpc-timeout", "5s"});
  EXPECT_EQ(r.exit_code, 3) << r.out;
}

}  // namespace
