// The --help check every binary's tests make: `--help` exits 0 and lists every flag
// the binary registers; an unknown flag exits 2 with a message naming it.
#ifndef SHARDCAST_TESTS_SUPPORT_HELP_CHECK_H_
#define SHARDCAST_TESTS_SUPPORT_HELP_CHECK_H_

#include <gtest/gtest.h>

#include <cctype>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/support/child_process.h"

namespace shardcast::testing_util {

// Whether `text` holds `flag` as a whole word: "--shuffle" is not found in
// "--shuffle-shards", nor "-b" in "--batch-size".
inline bool HasFlagWord(const std::string& text, const std::string& flag) {
  auto word_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  };
  for (size_t at = text.find(flag); at != std::string::npos; at = text.find(flag, at + 1)) {
    const size_t end = at + flag.size();
    if ((at == 0 || !word_char(text[at - 1])) && (end == text.size() || !word_char(text[end]))) {
      return true;
    }
  }
  return false;
}

// `command` (the binary and, for a subcommand, its name) with --help: exit 0, every
// one of `flags` in the output. With an unknown flag: exit 2, the flag named on stderr.
inline void ExpectHelpListsEveryFlag(const std::vector<std::string>& command,
                                     const std::vector<std::string>& flags) {
  std::vector<std::string> help = command;
  help.push_back("--help");
  const CommandOutput out = RunShellCapture(ShellCommand(help) + " 2>&1");
  EXPECT_EQ(out.exit_code, 0) << out.out;
  for (const std::string& flag : flags) {
    EXPECT_TRUE(HasFlagWord(out.out, flag)) << flag << " is not in:\n" << out.out;
  }
  EXPECT_TRUE(HasFlagWord(out.out, "--help")) << out.out;

  std::vector<std::string> bad = command;
  bad.push_back("--no-such-flag");
  const CommandOutput refused = RunShellCapture(ShellCommand(bad) + " 2>&1 >/dev/null");
  EXPECT_EQ(refused.exit_code, 2) << refused.out;
  EXPECT_NE(refused.out.find("unknown flag --no-such-flag"), std::string::npos) << refused.out;
}

}  // namespace shardcast::testing_util

#endif  // SHARDCAST_TESTS_SUPPORT_HELP_CHECK_H_
