// --listen unix:PATH: the real shardcast-server on a socket file serves the same batches
// as on TCP, gives the file mode 0660, refuses a path a live server or another file
// holds, replaces a crashed server's stale socket, and leaves no file behind on exit.
#include "server/net/unix_socket.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <fstream>

#include "tests/server/server_test_support.h"

namespace shardcast::server_testing {
namespace {

using ::testing::HasSubstr;
using HealthStatus = grpc::health::v1::HealthCheckResponse;

bool Exists(const std::string& path) {
  struct stat info;
  return lstat(path.c_str(), &info) == 0;
}

mode_t Mode(const std::string& path) {
  struct stat info;
  if (lstat(path.c_str(), &info) != 0) return 0;
  return info.st_mode;
}

TEST(UnixSocketPathTest, TakesThePathOfUnixAddressesOnly) {
  EXPECT_EQ(server::UnixSocketPath("unix:/run/shardcast/s.sock"), "/run/shardcast/s.sock");
  EXPECT_EQ(server::UnixSocketPath("unix:///run/s.sock"), "/run/s.sock");
  EXPECT_EQ(server::UnixSocketPath("unix:relative.sock"), "relative.sock");
  EXPECT_EQ(server::UnixSocketPath("127.0.0.1:50051"), std::nullopt);
  EXPECT_EQ(server::UnixSocketPath("[::1]:50051"), std::nullopt);
  EXPECT_EQ(server::UnixSocketPath("unix-abstract:name"), std::nullopt);
}

TEST(PrepareUnixSocketTest, RefusesWhatItCannotBindCleanly) {
  EXPECT_EQ(server::PrepareUnixSocket("").code(), absl::StatusCode::kInvalidArgument);
  const absl::Status too_long = server::PrepareUnixSocket("/tmp/" + std::string(120, 'x'));
  EXPECT_EQ(too_long.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_long.message(), HasSubstr("at most 107"));
  TempDir dir;
  EXPECT_TRUE(server::PrepareUnixSocket(dir.path() + "/absent.sock").ok());
  EXPECT_FALSE(Exists(dir.path() + "/absent.sock"));
}

TEST(PrepareUnixSocketTest, APathsControlAndNonUtf8BytesAreEscapedInItsError) {
  TempDir dir;
  const std::string hostile = dir.path() + "/evil\n\x1b[2J\xff\xfe.sock";
  std::ofstream(hostile) << "a file, not a socket\n";
  const absl::Status refused = server::PrepareUnixSocket(hostile);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("/evil\\n\\x1b[2J\\xff\\xfe.sock' exists and is not"));
  EXPECT_EQ(std::string(refused.message()).find_first_of("\n\x1b\xff"), std::string::npos);
  EXPECT_EQ(ReadWholeFile(hostile), "a file, not a socket\n");
}

class UnixSocketServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("sc_unix");  // short: socket paths hold at most 107 bytes
    MakeDataset(dir_->path() + "/data", /*samples=*/48, /*per_shard=*/16);
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string data() { return dir_->path() + "/data"; }
  static std::string socket_path() { return dir_->path() + "/s.sock"; }
  static std::string log(const std::string& name) { return dir_->path() + "/" + name + ".log"; }
  static std::vector<std::string> Args() {
    return {"--shards", data(),        "--listen",  "unix:" + socket_path(), "--batch-size",
            "8",        "--resize=36", "--crop=32", "--split=sample",        "--decode-threads=2"};
  }

  // Waits until `server` answers GetStatus serving, then stops it with SIGTERM: exit 0.
  static void ExpectServingThenStop(ChildServer& server) {
    auto stub = v1::Shardcast::NewStub(MakeChannel(server.target()));
    EXPECT_TRUE(WaitForStatus(stub.get(), [](const v1::GetStatusResponse& s) {
                  return s.serving();
                }).serving());
    kill(server.pid(), SIGTERM);
    EXPECT_EQ(server.WaitExit(20), 0);
  }
  // Args() listening on `address` instead of the suite's socket.
  static std::vector<std::string> ArgsListeningOn(const std::string& address) {
    std::vector<std::string> args = Args();
    args[3] = address;
    return args;
  }

  static TempDir* dir_;
};
TempDir* UnixSocketServerTest::dir_ = nullptr;

TEST_F(UnixSocketServerTest, ServesTheSameBatchesAsOverTcpFromASocketItsGroupMayUse) {
  Reference reference(data());
  ChildServer child(Args(), log("serve"));
  EXPECT_EQ(child.first_line(), "shardcast-server listening on unix:" + socket_path())
      << ReadWholeFile(log("serve"));
  ASSERT_EQ(child.target(), "unix:" + socket_path());
  ASSERT_TRUE(S_ISSOCK(Mode(socket_path())));
  EXPECT_EQ(Mode(socket_path()) & 0777, server::kUnixSocketMode);

  auto channel = MakeChannel(child.target());
  auto stub = v1::Shardcast::NewStub(channel);
  ASSERT_TRUE(WaitForStatus(stub.get(), [](const v1::GetStatusResponse& s) {
                return s.serving();
              }).serving());
  EXPECT_EQ(Health(channel), HealthStatus::SERVING);
  v1::RegisterResponse job;
  ASSERT_TRUE(
      Register(stub.get(), MakeRegister("uds", 0, 1, 0, v1::SPLIT_UNSPECIFIED, 0, 0), &job).ok());
  ASSERT_EQ(job.batches_per_epoch(), 6);
  StreamResult result = StreamAll(stub.get(), "uds", 0, 0, 0);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  const auto planned = reference.Plan(job, 1, 0, 0);
  ASSERT_EQ(result.batches.size(), planned.size());
  for (size_t b = 0; b < planned.size(); ++b) {
    reference.ExpectBatch(result.batches[b], planned[b], Reference::Spec(job));
  }
  EXPECT_THAT(ReadWholeFile(log("serve")), HasSubstr("listening on unix:" + socket_path()));

  kill(child.pid(), SIGTERM);
  EXPECT_EQ(child.WaitExit(20), 0);
  EXPECT_FALSE(Exists(socket_path())) << "the socket file outlived the server";
}

TEST_F(UnixSocketServerTest, ASecondServerOnTheSamePathIsRefusedAndTheFirstKeepsServing) {
  ChildServer first(Args(), log("first"));
  ASSERT_EQ(first.target(), "unix:" + socket_path()) << ReadWholeFile(log("first"));
  ChildServer second(Args(), log("second"));
  EXPECT_EQ(second.WaitExit(20), 1);
  EXPECT_THAT(ReadWholeFile(log("second")),
              HasSubstr("another server is listening on '" + socket_path() + "'"));
  ExpectServingThenStop(first);
}

TEST_F(UnixSocketServerTest, ACrashedServersSocketIsReplacedAndAnOrdinaryFileIsNot) {
  {
    ChildServer crashed(Args(), log("crashed"));
    ASSERT_EQ(crashed.target(), "unix:" + socket_path()) << ReadWholeFile(log("crashed"));
    kill(crashed.pid(), SIGKILL);
    EXPECT_EQ(crashed.WaitExit(20), -1);
  }
  ASSERT_TRUE(S_ISSOCK(Mode(socket_path()))) << "SIGKILL leaves the socket file behind";
  {
    ChildServer next(Args(), log("next"));
    EXPECT_EQ(next.target(), "unix:" + socket_path()) << ReadWholeFile(log("next"));
    EXPECT_THAT(ReadWholeFile(log("next")), HasSubstr("removed the stale socket"));
    ExpectServingThenStop(next);
  }
  const std::string file = dir_->path() + "/not-a-socket";
  std::ofstream(file) << "keep me\n";
  ChildServer refused(ArgsListeningOn("unix:" + file), log("refused"));
  EXPECT_EQ(refused.WaitExit(20), 1);
  EXPECT_THAT(ReadWholeFile(log("refused")), HasSubstr("exists and is not a socket"));
  EXPECT_EQ(ReadWholeFile(file), "keep me\n");
}

TEST_F(UnixSocketServerTest, PathsItCannotBindOnExitWithTheReason) {
  const std::string missing = dir_->path() + "/no-such-dir/s.sock";
  ChildServer in_missing_dir(ArgsListeningOn("unix:" + missing), log("missing-dir"));
  EXPECT_EQ(in_missing_dir.WaitExit(20), 1);
  EXPECT_THAT(ReadWholeFile(log("missing-dir")),
              HasSubstr("cannot listen on 'unix:" + missing + "'"));

  ChildServer on_a_directory(ArgsListeningOn("unix:" + dir_->path()), log("directory"));
  EXPECT_EQ(on_a_directory.WaitExit(20), 1);
  EXPECT_THAT(ReadWholeFile(log("directory")),
              HasSubstr("'" + dir_->path() + "' exists and is not a socket"));

  ChildServer without_a_path(ArgsListeningOn("unix:"), log("empty"));
  EXPECT_EQ(without_a_path.WaitExit(20), 1);
  EXPECT_THAT(ReadWholeFile(log("empty")), HasSubstr("unix: address without a path"));
  EXPECT_TRUE(S_ISDIR(Mode(dir_->path()))) << "the directory is left as it was";
}

}  // namespace
}  // namespace shardcast::server_testing
