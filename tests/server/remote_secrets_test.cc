// Secrets in dataset URLs (issue 35): the real shardcast-server serving
// http://user:password@host/... from nginx that requires those HTTP Basic credentials.
// The reads authenticate, and the password shows nowhere: not in GetStatus (which
// needs no token), not in the error a stream ends with once the store is gone, not in
// the server's log; nor does a wrong password that fails the dataset.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/server/server_test_support.h"
#include "tests/support/child_process.h"
#include "tests/support/object_servers.h"

namespace shardcast::server_testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing_util::NginxServer;

constexpr char kUser[] = "alice";
constexpr char kPassword[] = "pw-Hunter2-s3cret";
constexpr char kShardPattern[] = "/shard-{000000..000003}.tar";

class RemoteSecretsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MakeDataset(data_.path(), 160, 40);
    auto nginx = NginxServer::StartWithBasicAuth(data_.path(), kUser, kPassword);
    ASSERT_TRUE(nginx.ok()) << nginx.status();
    nginx_ = *std::move(nginx);
  }

  // The dataset's URL with `password` in its userinfo.
  std::string Url(const std::string& password) const {
    const std::string base = nginx_->url();  // http://127.0.0.1:PORT
    return absl::StrCat("http://", kUser, ":", password, "@", base.substr(7), kShardPattern);
  }

  std::vector<std::string> ServerArgs(const std::string& url) const {
    // A short deadline: a store that went away fails a read in about a second.
    return {"--shards",         url,  "--listen",           "127.0.0.1:0",
            "--remote-timeout", "1s", "--shard-read-retry", "0s"};
  }

  TempDir data_;
  TempDir logs_;
  std::unique_ptr<NginxServer> nginx_;
};

TEST_F(RemoteSecretsTest, APasswordInTheUrlAuthenticatesAndIsShownNowhere) {
  const std::string log = logs_.path() + "/server.err";
  ChildServer server(ServerArgs(Url(kPassword)), log);
  ASSERT_GT(server.port(), 0) << server.first_line() << ReadWholeFile(log);
  auto stub = v1::Shardcast::NewStub(MakeChannel(server.target()));
  const v1::GetStatusResponse status = WaitForStatus(
      stub.get(),
      [](const v1::GetStatusResponse& s) {
        return s.datasets_size() == 1 && s.datasets(0).state() != v1::DatasetStatus::INDEXING;
      },
      30);
  ASSERT_EQ(status.datasets_size(), 1);
  ASSERT_EQ(status.datasets(0).state(), v1::DatasetStatus::SERVING)
      << status.datasets(0).error() << "\n"
      << ReadWholeFile(log);
  EXPECT_EQ(status.datasets(0).num_shards(), 4) << "the HEADs authenticated";
  EXPECT_THAT(status.DebugString(), Not(HasSubstr(kPassword)));
  EXPECT_THAT(status.datasets(0).dir(), HasSubstr("alice:REDACTED@"));
  // shardcast-ctl status shows what GetStatus says, in text and JSON.
  const std::string ctl = std::string(SHARDCAST_BINARY_DIR) + "/client/shardcast-ctl";
  for (const std::string format : {"", " --json"}) {
    const testing_util::CommandOutput shown = testing_util::RunShellCapture(
        absl::StrCat(ctl, " status", format, " --server ", server.target(), " 2>&1"));
    EXPECT_EQ(shown.exit_code, 0) << shown.out;
    EXPECT_THAT(shown.out, HasSubstr("alice:REDACTED@"));
    EXPECT_THAT(shown.out, Not(HasSubstr(kPassword)));
  }

  // The reads authenticate: a whole epoch of both ranks.
  for (int rank = 0; rank < 2; ++rank) {
    v1::RegisterResponse registered;
    ASSERT_TRUE(Register(stub.get(), MakeRegister("job", rank, 2, 8), &registered).ok());
  }
  for (int rank = 0; rank < 2; ++rank) {
    const StreamResult epoch = StreamAll(stub.get(), "job", rank, 0, 0);
    EXPECT_TRUE(epoch.status.ok()) << epoch.status.error_message();
    EXPECT_EQ(epoch.batches.size(), 10u);
  }

  // The store goes away: the stream ends with an error naming the object, not the
  // password.
  nginx_.reset();
  const StreamResult failed = StreamAll(stub.get(), "job", 0, 1, 0);
  EXPECT_FALSE(failed.status.ok());
  EXPECT_THAT(failed.status.error_message(), HasSubstr("shard-00000"));
  EXPECT_THAT(failed.status.error_message(), Not(HasSubstr(kPassword)));
  EXPECT_THAT(GetStatus(stub.get()).DebugString(), Not(HasSubstr(kPassword)));

  server.WaitExit(0);  // (still running: killed at scope exit)
  const std::string logged = ReadWholeFile(log);
  EXPECT_THAT(logged, HasSubstr("alice:REDACTED@")) << "the dataset's URL is logged, redacted";
  EXPECT_THAT(logged, Not(HasSubstr(kPassword)));
}

TEST_F(RemoteSecretsTest, AWrongPasswordFailsTheDatasetWithoutShowingIt) {
  const std::string log = logs_.path() + "/server.err";
  const std::string wrong = "wrong-Secret-42";
  ChildServer server(ServerArgs(Url(wrong)), log);
  EXPECT_NE(server.WaitExit(30), 0) << "a dataset that cannot be indexed ends the server";
  const std::string logged = ReadWholeFile(log);
  EXPECT_THAT(logged, HasSubstr("401"));
  EXPECT_THAT(logged, Not(HasSubstr(wrong)));
}

}  // namespace
}  // namespace shardcast::server_testing
