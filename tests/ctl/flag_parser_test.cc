// Tests of shardcast-ctl's per-subcommand flag parser: accepted spellings and
// the error for every kind of bad command line.
#include "client/ctl/flag_parser.h"

#include <gtest/gtest.h>

namespace shardcast::ctl {
namespace {

struct Flags {
  std::string server;
  std::string service = "default";
  double timeout = 5;
  bool json = false;
  FlagParser parser;
  Flags() {
    parser.AddString("server", "ADDR", &server, "address");
    parser.AddString("service", "NAME", &service, "may be empty", /*allow_empty=*/true);
    parser.AddPositiveDouble("timeout", "SECONDS", &timeout, "deadline");
    parser.AddBool("json", &json, "json output");
  }
};

TEST(FlagParserTest, SeparateAndEqualsValues) {
  Flags f;
  ASSERT_TRUE(f.parser.Parse({"--server", "h:1", "--timeout=2.5", "--json"}).ok());
  EXPECT_EQ(f.server, "h:1");
  EXPECT_DOUBLE_EQ(f.timeout, 2.5);
  EXPECT_TRUE(f.json);
  EXPECT_FALSE(f.parser.help_requested());
}

TEST(FlagParserTest, EmptyValueWhereAllowed) {
  Flags f;
  ASSERT_TRUE(f.parser.Parse({"--service", ""}).ok());
  EXPECT_EQ(f.service, "");
  Flags g;
  ASSERT_TRUE(g.parser.Parse({"--service="}).ok());
  EXPECT_EQ(g.service, "");
}

TEST(FlagParserTest, DefaultsStayWhenFlagsAreAbsent) {
  Flags f;
  ASSERT_TRUE(f.parser.Parse({}).ok());
  EXPECT_EQ(f.server, "");
  EXPECT_DOUBLE_EQ(f.timeout, 5);
  EXPECT_FALSE(f.json);
}

TEST(FlagParserTest, BoolAcceptsExplicitValue) {
  Flags f;
  ASSERT_TRUE(f.parser.Parse({"--json=false"}).ok());
  EXPECT_FALSE(f.json);
  Flags g;
  EXPECT_EQ(g.parser.Parse({"--json=maybe"}).message(), "--json wants true or false, got 'maybe'");
}

TEST(FlagParserTest, Help) {
  Flags f;
  ASSERT_TRUE(f.parser.Parse({"-h"}).ok());
  EXPECT_TRUE(f.parser.help_requested());
  const std::string help = f.parser.FlagsHelp();
  EXPECT_NE(help.find("--server ADDR"), std::string::npos) << help;
  EXPECT_NE(help.find("--timeout SECONDS"), std::string::npos) << help;
  EXPECT_NE(help.find("(default 5)"), std::string::npos) << help;
  EXPECT_NE(help.find("--help"), std::string::npos) << help;
}

TEST(FlagParserTest, Errors) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{"--bogus"}, "unknown flag --bogus"},
           {{"stray"}, "unexpected argument 'stray' (flags are --name VALUE)"},
           {{"-x"}, "unexpected argument '-x' (flags are --name VALUE)"},
           {{"--"}, "unexpected argument '--' (flags are --name VALUE)"},
           {{"--server"}, "--server needs a value (ADDR)"},
           {{"--server", "--json"}, "--server needs a value (ADDR)"},
           {{"--server="}, "--server needs a non-empty ADDR"},
           {{"--server", "a", "--server", "b"}, "--server given twice"},
           {{"--timeout", "0"}, "--timeout wants a number > 0 (SECONDS), got '0'"},
           {{"--timeout", "-1"}, "--timeout wants a number > 0 (SECONDS), got '-1'"},
           {{"--timeout", "soon"}, "--timeout wants a number > 0 (SECONDS), got 'soon'"},
           {{"--timeout=inf"}, "--timeout wants a number > 0 (SECONDS), got 'inf'"},
       }) {
    Flags f;
    absl::Status s = f.parser.Parse(c.args);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.args[0];
    EXPECT_EQ(s.message(), c.message) << c.args[0];
  }
}

}  // namespace
}  // namespace shardcast::ctl
