// shardcast-ctl's --help, and each subcommand's: exit 0, every flag listed; an unknown
// flag or command exits 2 naming it.
#include <gtest/gtest.h>

#include "tests/support/child_process.h"
#include "tests/support/help_check.h"

namespace shardcast::testing_util {
namespace {

const std::string kCtl = BinaryPath("client/shardcast-ctl");

TEST(CtlHelpTest, ListsEveryCommand) {
  for (const char* help : {"--help", "-h", "help"}) {
    const CommandOutput out = RunShellCapture(ShellCommand({kCtl, help}));
    EXPECT_EQ(out.exit_code, 0) << help;
    for (const char* command : {"health", "index", "inspect", "plan", "status"}) {
      EXPECT_TRUE(HasFlagWord(out.out, command)) << command << " is not in:\n" << out.out;
    }
  }
  const CommandOutput unknown =
      RunShellCapture(ShellCommand({kCtl, "no-such-command"}) + " 2>&1 >/dev/null");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.out.find("unknown command 'no-such-command'"), std::string::npos)
      << unknown.out;
  EXPECT_EQ(RunShell(ShellCommand({kCtl}) + " 2>/dev/null"), 2);
}

TEST(CtlHelpTest, Health) {
  ExpectHelpListsEveryFlag({kCtl, "health"},
                           {"--server", "--service", "--dataset", "--rpc-timeout", "--tls-ca",
                            "--tls-cert", "--tls-key", "--auth-token-file"});
}

TEST(CtlHelpTest, Status) {
  ExpectHelpListsEveryFlag(
      {kCtl, "status"}, {"--server", "--json", "--watch", "--interval", "--count", "--rpc-timeout",
                         "--tls-ca", "--tls-cert", "--tls-key", "--auth-token-file"});
}

TEST(CtlHelpTest, Plan) {
  ExpectHelpListsEveryFlag(
      {kCtl, "plan"},
      {"--shards", "--sizes", "--world-size", "--batch-size", "--workers", "--split", "--remainder",
       "--seed", "--shuffle-shards", "--shuffle-buffer", "--block-size", "--epoch", "--rank"});
}

TEST(CtlHelpTest, Inspect) {
  ExpectHelpListsEveryFlag({kCtl, "inspect"},
                           {"--json", "--samples", "--label-field", "--cache-dir", "--threads"});
}

TEST(CtlHelpTest, Index) {
  ExpectHelpListsEveryFlag({kCtl, "index"},
                           {"--output", "--label-field", "--max-classes", "--s3-endpoint",
                            "--s3-region", "--s3-profile", "--s3-path-style"});
}

}  // namespace
}  // namespace shardcast::testing_util
