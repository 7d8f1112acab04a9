// Tests of the one flag parser (common/flags/flags.h) and the job's flag table
// (common/flags/job_flags.h): every accepted spelling, and the error for each kind of bad
// command line, word for word where users read it.
#include "common/flags/flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/flags/job_flags.h"
#include "common/plan/job_config.h"

namespace shardcast {
namespace {

using ::testing::HasSubstr;

// A flag set with one flag of each kind, as the binaries use them.
struct Flags {
  std::string server;
  std::string service = "default";
  bool json = false;
  int32_t batch = 32;
  int32_t shift = 0;
  int64_t steps = 0;
  uint64_t seed = 0;
  double lr = 1e-4;
  absl::Duration timeout = absl::Seconds(5);
  int64_t max_bytes = int64_t{512} << 20;
  std::string arch = "resnet18";
  std::vector<double> betas = {0.9, 0.999};
  std::vector<double> mean = {0.485, 0.456, 0.406};
  std::optional<int32_t> workers;
  std::optional<uint64_t> job_seed;
  std::optional<bool> shuffle_shards;
  std::optional<std::string> split;
  std::vector<std::string> shuffles;  // what the optional-value flag received
  FlagSet set{"prog"};

  Flags() {
    set.String({{"--server"}, "ADDR", "server address"}, &server);
    set.String({{"--service"}, "NAME", "may be empty"}, &service, /*allow_empty=*/true);
    set.Bool({{"--json"}, "", "json output"}, &json);
    set.Section("Data:");
    set.Int({{"--batch-size", "-b", "--batch_size"}, "B", "per-rank batch size"}, &batch, 1, 1024);
    set.Int({{"--shift"}, "N", "may be negative"}, &shift);
    set.Int64({{"--max-steps"}, "N", "stop after N steps"}, &steps, 0);
    set.Uint64({{"--seed"}, "S", "seed"}, &seed);
    set.Double({{"--lr", "-lr"}, "X", "learning rate"}, &lr, 0);
    set.Duration({{"--timeout"}, "", "deadline of the call"}, &timeout);
    set.Size({{"--max-bytes"}, "", "largest message"}, &max_bytes);
    set.Choice({{"--arch"}, "", "model"}, {"resnet18", "small-cnn"}, &arch);
    set.DoubleList({{"--betas"}, "B1 B2", "Adam betas"}, 2, &betas);
    set.DoubleList({{"--mean"}, "R G B", "normalization mean"}, 3, &mean);
    set.Section("Optional:");
    set.OptionalInt({{"--workers", "-w"}, "K", "workers"}, &workers, 1, 64);
    set.OptionalUint64({{"--job-seed"}, "S", "job seed"}, &job_seed);
    set.OptionalBool({{"--shuffle-shards"}, "", "shuffle shards"}, &shuffle_shards);
    set.OptionalChoice({{"--split"}, "", "split"}, {"shard", "sample"}, &split);
    set.Add({{"--shuffle"}, "[N]", "optional value", ""}, FlagSet::kOptionalValue,
            [this](const std::string&, const std::vector<std::string>& values) {
              shuffles.push_back(values.empty() ? "<bare>" : values[0]);
              return absl::OkStatus();
            });
  }
};

// The error message of parsing `args` ("" when they parse).
std::string ParseError(const std::vector<std::string>& args) {
  Flags f;
  return std::string(f.set.Parse(args).message());
}

TEST(FlagSetTest, SeparateAndEqualsValues) {
  Flags f;
  ASSERT_TRUE(f.set.Parse({"--server", "h:1", "--batch-size=8", "--lr", "0.5", "--json"}).ok());
  EXPECT_EQ(f.server, "h:1");
  EXPECT_EQ(f.batch, 8);
  EXPECT_DOUBLE_EQ(f.lr, 0.5);
  EXPECT_TRUE(f.json);
  EXPECT_FALSE(f.set.help_requested());
  EXPECT_TRUE(f.set.Given("--server"));
  EXPECT_FALSE(f.set.Given("--seed"));
}

TEST(FlagSetTest, DefaultsStayWhenFlagsAreAbsent) {
  Flags f;
  ASSERT_TRUE(f.set.Parse(std::vector<std::string>{}).ok());
  EXPECT_EQ(f.server, "");
  EXPECT_EQ(f.service, "default");
  EXPECT_EQ(f.batch, 32);
  EXPECT_EQ(f.timeout, absl::Seconds(5));
  EXPECT_FALSE(f.workers.has_value());
  EXPECT_FALSE(f.job_seed.has_value());
  EXPECT_FALSE(f.shuffle_shards.has_value());
  EXPECT_FALSE(f.split.has_value());
}

TEST(FlagSetTest, ParseArgvSkipsTheProgramName) {
  Flags f;
  char prog[] = "prog", flag[] = "-b", value[] = "4";
  char* argv[] = {prog, flag, value};
  ASSERT_TRUE(f.set.Parse(3, argv).ok());
  EXPECT_EQ(f.batch, 4);
}

TEST(FlagSetTest, AliasesIncludingSingleDash) {
  Flags f;
  ASSERT_TRUE(f.set.Parse({"-b", "16", "-lr", "0.01", "-w", "3"}).ok());
  EXPECT_EQ(f.batch, 16);
  EXPECT_DOUBLE_EQ(f.lr, 0.01);
  EXPECT_EQ(f.workers, 3);
  // Given() takes the canonical name, whatever spelling was typed.
  EXPECT_TRUE(f.set.Given("--batch-size"));
  EXPECT_TRUE(f.set.Given("--workers"));
  Flags g;
  ASSERT_TRUE(g.set.Parse({"--batch_size=2", "-lr=0.25"}).ok());
  EXPECT_EQ(g.batch, 2);
  EXPECT_DOUBLE_EQ(g.lr, 0.25);
}

TEST(FlagSetTest, NegativeNumbersAreValuesAndDashWordsAreFlags) {
  Flags f;
  ASSERT_TRUE(f.set.Parse({"--shift", "-1"}).ok());
  EXPECT_EQ(f.shift, -1);
  EXPECT_EQ(ParseError({"--shift", "-0.5e1"}), "--shift takes an integer, got '-0.5e1'");
  EXPECT_EQ(ParseError({"--server", "-lr"}), "--server needs a value (ADDR)");
  EXPECT_EQ(ParseError({"--server", "--json"}), "--server needs a value (ADDR)");
  EXPECT_EQ(ParseError({"--server"}), "--server needs a value (ADDR)");
}

TEST(FlagSetTest, MultiValueFlags) {
  Flags f;
  ASSERT_TRUE(f.set.Parse({"--betas", "0.8", "0.99", "--mean", "0.5", "0.5", "0.5"}).ok());
  EXPECT_THAT(f.betas, ::testing::ElementsAre(0.8, 0.99));
  EXPECT_THAT(f.mean, ::testing::ElementsAre(0.5, 0.5, 0.5));
  // Comma-separated, in one argument or spread over fewer than N.
  Flags g;
  ASSERT_TRUE(g.set.Parse({"--betas", "0.7,0.9", "--mean=0.1,0.2,0.3"}).ok());
  EXPECT_THAT(g.betas, ::testing::ElementsAre(0.7, 0.9));
  EXPECT_THAT(g.mean, ::testing::ElementsAre(0.1, 0.2, 0.3));
  Flags h;
  ASSERT_TRUE(h.set.Parse({"--mean", "0.1,0.2", "0.3", "--json"}).ok());
  EXPECT_THAT(h.mean, ::testing::ElementsAre(0.1, 0.2, 0.3));
  EXPECT_TRUE(h.json);
  Flags k;
  ASSERT_TRUE(k.set.Parse({"--betas", "-0.5", "0.5"}).ok());
  EXPECT_THAT(k.betas, ::testing::ElementsAre(-0.5, 0.5));
  Flags m;
  ASSERT_TRUE(m.set.Parse({"--betas", "-0.5,-.5"}).ok());
  EXPECT_THAT(m.betas, ::testing::ElementsAre(-0.5, -0.5));
}

TEST(FlagSetTest, MultiValueErrors) {
  EXPECT_EQ(ParseError({"--betas", "0.9"}), "--betas needs 2 values (B1 B2)");
  EXPECT_EQ(ParseError({"--betas", "0.9", "--json"}), "--betas needs 2 values (B1 B2)");
  EXPECT_EQ(ParseError({"--betas=0.9"}), "--betas takes 2 numbers, got 1 ('0.9')");
  EXPECT_EQ(ParseError({"--betas", "0.9,0.99,0.999"}),
            "--betas takes 2 numbers, got 3 ('0.9,0.99,0.999')");
  EXPECT_EQ(ParseError({"--mean", "0.5", "x", "0.5"}), "--mean takes numbers, got 'x'");
}

TEST(FlagSetTest, OptionalValue) {
  Flags f;
  ASSERT_TRUE(f.set.Parse({"--shuffle"}).ok());
  EXPECT_THAT(f.shuffles, ::testing::ElementsAre("<bare>"));
  Flags g;
  ASSERT_TRUE(g.set.Parse({"--shuffle", "100", "--json"}).ok());
  EXPECT_THAT(g.shuffles, ::testing::ElementsAre("100"));
  // "-1" is a value; "-lr" is the next flag.
  Flags h;
  ASSERT_TRUE(h.set.Parse({"--shuffle", "-1"}).ok());
  EXPECT_THAT(h.shuffles, ::testing::ElementsAre("-1"));
  Flags k;
  ASSERT_TRUE(k.set.Parse({"--shuffle", "-lr", "0.1"}).ok());
  EXPECT_THAT(k.shuffles, ::testing::ElementsAre("<bare>"));
  EXPECT_DOUBLE_EQ(k.lr, 0.1);
  Flags m;
  ASSERT_TRUE(m.set.Parse({"--shuffle=7"}).ok());
  EXPECT_THAT(m.shuffles, ::testing::ElementsAre("7"));
}

TEST(FlagSetTest, Booleans) {
  Flags f;
  ASSERT_TRUE(f.set.Parse({"--json=true"}).ok());
  EXPECT_TRUE(f.json);
  Flags g;
  g.json = true;
  ASSERT_TRUE(g.set.Parse({"--json=false"}).ok());
  EXPECT_FALSE(g.json);
  Flags h;
  ASSERT_TRUE(h.set.Parse({"--shuffle-shards=false"}).ok());
  EXPECT_EQ(h.shuffle_shards, false);
  Flags k;
  ASSERT_TRUE(k.set.Parse({"--shuffle-shards"}).ok());
  EXPECT_EQ(k.shuffle_shards, true);
  EXPECT_EQ(ParseError({"--json=maybe"}), "--json takes true or false, got 'maybe'");
  // A switch never takes the next argument as its value.
  EXPECT_EQ(ParseError({"--json", "false"}), "unexpected argument 'false' (prog takes only flags)");
}

TEST(FlagSetTest, Help) {
  for (const char* help : {"-h", "--help"}) {
    Flags f;
    ASSERT_TRUE(f.set.Parse({help}).ok());
    EXPECT_TRUE(f.set.help_requested());
  }
  // --help wins over what would not parse; after `--` it is an argument.
  Flags f;
  ASSERT_TRUE(f.set.Parse({"--bogus", "--batch-size", "0", "--help"}).ok());
  EXPECT_TRUE(f.set.help_requested());
  EXPECT_EQ(f.batch, 32);
  std::vector<std::string> positional;
  Flags g;
  g.set.AcceptPositional(&positional);
  ASSERT_TRUE(g.set.Parse({"--", "--help"}).ok());
  EXPECT_FALSE(g.set.help_requested());
  EXPECT_THAT(positional, ::testing::ElementsAre("--help"));
}

TEST(FlagSetTest, HelpText) {
  Flags f;
  const std::string help = f.set.Help();
  // Untitled section first, then sections in order, --help last.
  EXPECT_TRUE(absl::StartsWith(help, "  --server ADDR             server address\n")) << help;
  EXPECT_THAT(help, HasSubstr("\nData:\n  --batch-size, -b, --batch_size B\n"
                              "                            per-rank batch size (default 32)\n"));
  EXPECT_LT(help.find("Data:"), help.find("Optional:"));
  EXPECT_THAT(help, HasSubstr("  --json                    json output\n"));
  EXPECT_THAT(help, HasSubstr("  --lr, -lr X               learning rate (default 0.0001)\n"));
  EXPECT_THAT(help, HasSubstr("--timeout DURATION        deadline of the call (default 5s)\n"));
  EXPECT_THAT(help, HasSubstr("--max-bytes SIZE          largest message (default 512MiB)\n"));
  EXPECT_THAT(help, HasSubstr("--arch resnet18|small-cnn model (default resnet18)\n"));
  EXPECT_THAT(help, HasSubstr("--betas B1 B2             Adam betas (default 0.9 0.999)\n"));
  EXPECT_THAT(help, HasSubstr("--split shard|sample      split\n"));
  EXPECT_THAT(help, HasSubstr("--workers, -w K           workers\n"));
  EXPECT_TRUE(absl::EndsWith(help, "  --help, -h                print this help and exit\n"))
      << help;

  // A spec's default_text replaces the value's; a newline in help is a space.
  FlagSet set("prog");
  int32_t n = 3;
  set.Int({{"--n"}, "N", "first line\nsecond line", "three"}, &n);
  EXPECT_EQ(set.Help(),
            "  --n N                     first line second line (default three)\n"
            "  --help, -h                print this help and exit\n");
  // Help is filled into lines indented to the help column, within 100 columns, the
  // default included.
  FlagSet wide("prog");
  std::string text = "x";
  wide.String({{"--text"},
               "T",
               "a help text that is much longer than what fits after the names\nbefore the "
               "100th column, so it takes lines"},
              &text);
  EXPECT_EQ(wide.Help(),
            "  --text T                  a help text that is much longer than what fits after "
            "the names before\n"
            "                            the 100th column, so it takes lines (default x)\n"
            "  --help, -h                print this help and exit\n");
}

TEST(FlagSetTest, Positional) {
  std::vector<std::string> positional;
  Flags f;
  f.set.AcceptPositional(&positional);
  ASSERT_TRUE(f.set.Parse({"a", "--json", "-", "b", "--", "--server", "-x"}).ok());
  EXPECT_THAT(positional, ::testing::ElementsAre("a", "-", "b", "--server", "-x"));
  EXPECT_TRUE(f.json);
  EXPECT_EQ(f.server, "");
  // Without AcceptPositional, a non-flag is an error; `--` alone is not.
  EXPECT_EQ(ParseError({"stray"}), "unexpected argument 'stray' (prog takes only flags)");
  EXPECT_EQ(ParseError({"--", "x"}), "unexpected argument 'x' (prog takes only flags)");
  EXPECT_TRUE(ParseError({"--"}).empty());
}

TEST(FlagSetTest, Errors) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{"--bogus"}, "unknown flag --bogus"},
           {{"--bogus=1"}, "unknown flag --bogus"},
           {{"-x"}, "unknown flag -x"},
           {{"--server="}, "--server needs a non-empty ADDR"},
           {{"--server", ""}, "--server needs a non-empty ADDR"},
           {{"--server", "a", "--server", "b"}, "--server given twice (--server are one flag)"},
           {{"-b", "1", "--batch-size", "2"},
            "--batch-size given twice (--batch-size, -b, --batch_size are one flag)"},
           {{"--batch-size", "0"}, "--batch-size takes an integer in [1, 1024], got '0'"},
           {{"--batch-size", "x"}, "--batch-size takes an integer in [1, 1024], got 'x'"},
           {{"-b", "2000"}, "-b takes an integer in [1, 1024], got '2000'"},
           {{"--shift", "99999999999"}, "--shift takes an integer, got '99999999999'"},
           {{"--max-steps", "-1"}, "--max-steps takes an integer >= 0, got '-1'"},
           {{"--seed", "-1"}, "--seed takes an integer >= 0, got '-1'"},
           {{"--seed", "1.5"}, "--seed takes an integer >= 0, got '1.5'"},
           {{"--lr", "-1"}, "--lr takes a number >= 0, got '-1'"},
           {{"--lr", "inf"}, "--lr takes a number >= 0, got 'inf'"},
           {{"-lr", "soon"}, "-lr takes a number >= 0, got 'soon'"},
           {{"--timeout", "soon"},
            "--timeout: 'soon' is not a duration >= 0 (e.g. 250ms, 30s, 5m, 1h30m; a bare "
            "number is seconds)"},
           {{"--timeout", "-1"},
            "--timeout: '-1' is not a duration >= 0 (e.g. 250ms, 30s, 5m, 1h30m; a bare "
            "number is seconds)"},
           {{"--max-bytes", "lots"},
            "--max-bytes: 'lots' is not a size (bytes, or e.g. 512KiB, 64MiB, 1.5G, 10MB)"},
           {{"--arch", "vgg"}, "--arch takes resnet18 or small-cnn, got 'vgg'"},
           {{"--split", "node"}, "--split takes shard or sample, got 'node'"},
           {{"-w", "0"}, "-w takes an integer in [1, 64], got '0'"},
           {{"--job-seed", "x"}, "--job-seed takes an integer >= 0, got 'x'"},
       }) {
    Flags f;
    const absl::Status s = f.set.Parse(c.args);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.args[0];
    EXPECT_EQ(std::string(s.message()), c.message) << c.args[0];
  }
}

TEST(FlagSetTest, TypedValues) {
  Flags f;
  ASSERT_TRUE(f.set
                  .Parse({"--timeout", "1h30m", "--max-bytes", "1.5G", "--seed",
                          "18446744073709551615", "--max-steps", "9000000000", "--arch",
                          "small-cnn", "--split", "sample", "--job-seed", "7", "--service="})
                  .ok());
  EXPECT_EQ(f.timeout, absl::Minutes(90));
  EXPECT_EQ(f.max_bytes, int64_t{3} << 29);
  EXPECT_EQ(f.seed, 18446744073709551615u);
  EXPECT_EQ(f.steps, 9000000000);
  EXPECT_EQ(f.arch, "small-cnn");
  EXPECT_EQ(f.split, "sample");
  EXPECT_EQ(f.job_seed, 7u);
  EXPECT_EQ(f.service, "");
}

TEST(FlagSetTest, CustomApplyErrorsPassThrough) {
  FlagSet set("prog");
  set.Add({{"--two", "-t"}, "A B", "two words"}, 2,
          [](const std::string& flag, const std::vector<std::string>& values) {
            return values[0] == values[1]
                       ? absl::InvalidArgumentError(flag + " wants two different words")
                       : absl::OkStatus();
          });
  EXPECT_EQ(set.Parse({"-t", "a", "a"}).ToString(),
            "INVALID_ARGUMENT: -t wants two different words");
}

TEST(FlagSetTest, RepeatableFlagsSeeEveryValueOthersStillRefuseTwice) {
  FlagSet set("prog");
  std::vector<std::string> seen;
  set.Add({{"--dataset"}, "NAME=DIR", "a dataset", "none", /*repeatable=*/true}, 1,
          [&seen](const std::string&, const std::vector<std::string>& values) {
            seen.push_back(values[0]);
            return absl::OkStatus();
          });
  std::string once;
  set.String({{"--once"}, "X", "given once"}, &once);
  ASSERT_TRUE(set.Parse({"--dataset", "a=/x", "--once", "y", "--dataset=b=/z"}).ok());
  EXPECT_EQ(seen, (std::vector<std::string>{"a=/x", "b=/z"}));
  EXPECT_EQ(set.Parse({"--once", "1", "--once", "2"}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ParseFlagDurationTest, Accepted) {
  struct Case {
    const char* text;
    absl::Duration want;
  };
  for (const Case& c : std::vector<Case>{{"250ms", absl::Milliseconds(250)},
                                         {"30s", absl::Seconds(30)},
                                         {"5m", absl::Minutes(5)},
                                         {"1h30m", absl::Minutes(90)},
                                         {"1.5s", absl::Milliseconds(1500)},
                                         {"0", absl::ZeroDuration()},
                                         {"2.5", absl::Milliseconds(2500)},
                                         {"300", absl::Minutes(5)},
                                         {" 10s ", absl::Seconds(10)}}) {
    absl::StatusOr<absl::Duration> d = ParseFlagDuration(c.text);
    ASSERT_TRUE(d.ok()) << c.text << ": " << d.status();
    EXPECT_EQ(*d, c.want) << c.text;
  }
}

TEST(ParseFlagDurationTest, Refused) {
  for (const char* text : {"", "soon", "-5s", "-1", "inf", "nan", "10 s", "5 minutes", "1x"}) {
    absl::StatusOr<absl::Duration> d = ParseFlagDuration(text);
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << text;
  }
}

TEST(FormatFlagDurationTest, ReadableAndParsesBack) {
  EXPECT_EQ(FormatFlagDuration(absl::Minutes(5)), "5m");
  EXPECT_EQ(FormatFlagDuration(absl::Minutes(90)), "1h30m");
  EXPECT_EQ(FormatFlagDuration(absl::Milliseconds(250)), "250ms");
  EXPECT_EQ(FormatFlagDuration(absl::Milliseconds(1500)), "1.5s");
  EXPECT_EQ(FormatFlagDuration(absl::ZeroDuration()), "0");
  for (absl::Duration d : {absl::Minutes(5), absl::Milliseconds(1500), absl::Seconds(3661)}) {
    EXPECT_EQ(*ParseFlagDuration(FormatFlagDuration(d)), d);
  }
}

TEST(ParseFlagSizeTest, Accepted) {
  struct Case {
    const char* text;
    int64_t want;
  };
  for (const Case& c : std::vector<Case>{
           {"0", 0},
           {"4096", 4096},
           {"7B", 7},
           {"1K", 1024},
           {"1k", 1024},
           {"1KiB", 1024},
           {"2M", 2 << 20},
           {"512MiB", int64_t{512} << 20},
           {"4GiB", int64_t{4} << 30},
           {"4g", int64_t{4} << 30},
           {"1T", int64_t{1} << 40},
           {"1TiB", int64_t{1} << 40},
           {"1.5G", int64_t{3} << 29},
           {"0.5KiB", 512},
           {"1.0000001K", 1024},  // the fractional byte is dropped
           {"1kB", 1000},
           {"1KB", 1000},
           {"10MB", 10000000},
           {"2GB", 2000000000},
           {"1TB", 1000000000000},
           {"2.5kB", 2500},
           {"9223372036854775807", 9223372036854775807},
           {"8388607T", int64_t{8388607} << 40},
       }) {
    absl::StatusOr<int64_t> bytes = ParseFlagSize(c.text);
    ASSERT_TRUE(bytes.ok()) << c.text << ": " << bytes.status();
    EXPECT_EQ(*bytes, c.want) << c.text;
  }
}

TEST(ParseFlagSizeTest, Refused) {
  for (const char* text :
       {"", "lots", "-1", "-1K", "1.2.3", "1X", "K", ".", "1 K", "1KiBB", "1PiB", "1e3"}) {
    absl::StatusOr<int64_t> bytes = ParseFlagSize(text);
    EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(bytes.status().message(), HasSubstr("is not a size")) << text;
  }
  // Overflow: the result must fit int64.
  for (const char* text :
       {"9223372036854775808", "99999999999999999999999", "8388608T", "8EiB", "9300000TB"}) {
    absl::StatusOr<int64_t> bytes = ParseFlagSize(text);
    EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument) << text;
  }
  EXPECT_EQ(ParseFlagSize("8388608T").status().message(),
            "'8388608T' is too large (at most 9223372036854775807 bytes)");
}

TEST(FormatFlagSizeTest, ExactUnitsAndParsesBack) {
  EXPECT_EQ(FormatFlagSize(0), "0");
  EXPECT_EQ(FormatFlagSize(int64_t{512} << 20), "512MiB");
  EXPECT_EQ(FormatFlagSize(int64_t{3} << 29), "1536MiB");
  EXPECT_EQ(FormatFlagSize(1024), "1KiB");
  EXPECT_EQ(FormatFlagSize(10000000), "10MB");
  EXPECT_EQ(FormatFlagSize(1000), "1kB");
  EXPECT_EQ(FormatFlagSize(1234567), "1234567");
  for (int64_t bytes : {int64_t{1} << 40, int64_t{3} << 29, int64_t{8000}, int64_t{1234567}}) {
    EXPECT_EQ(*ParseFlagSize(FormatFlagSize(bytes)), bytes) << bytes;
  }
}

// The job's flag table, as the server and the trainer use it.
struct JobFlags {
  JobOverrides overrides;
  FlagSet set{"prog"};
  JobFlags() {
    JobConfig defaults;
    defaults.plan.batch_size = 32;
    AddJobFlags(&set, defaults, &overrides);
  }
};

TEST(JobFlagsTest, SeedSpellings) {
  JobFlags f;
  ASSERT_TRUE(f.set.Parse({"-b", "16", "--split", "sample", "--shuffle", "100"}).ok());
  EXPECT_EQ(f.overrides.batch_size, 16);
  EXPECT_EQ(f.overrides.split, Split::kSample);
  EXPECT_EQ(f.overrides.shuffle_shards, true);
  EXPECT_EQ(f.overrides.shuffle_buffer, 100);
  EXPECT_FALSE(f.overrides.remainder.has_value());
  EXPECT_FALSE(f.overrides.crop.has_value());

  JobFlags g;
  ASSERT_TRUE(g.set
                  .Parse({"--batch_size", "8", "--num_workers", "4", "--transform=random",
                          "--remainder", "pad", "--seed", "9", "--crop", "160", "--resize", "192",
                          "--block-size", "2", "--shuffle-buffer", "50"})
                  .ok());
  const JobConfig config = ApplyOverrides(g.overrides, JobConfig{});
  EXPECT_EQ(config.plan.batch_size, 8);
  EXPECT_EQ(config.plan.workers, 4);
  EXPECT_EQ(config.plan.remainder, Remainder::kPad);
  EXPECT_EQ(config.plan.seed, 9u);
  EXPECT_EQ(config.plan.block_size, 2);
  EXPECT_EQ(config.plan.shuffle_buffer, 50);
  EXPECT_EQ(config.transform.mode, TransformMode::kRandom);
  EXPECT_EQ(config.transform.crop, 160);
  EXPECT_EQ(config.transform.resize, 192);
}

TEST(JobFlagsTest, Shuffle) {
  // Bare: shard shuffle on, the buffer left to its default.
  JobFlags bare;
  ASSERT_TRUE(bare.set.Parse({"--shuffle"}).ok());
  EXPECT_EQ(bare.overrides.shuffle_shards, true);
  EXPECT_FALSE(bare.overrides.shuffle_buffer.has_value());
  // Negative: no shuffle at all.
  JobFlags off;
  ASSERT_TRUE(off.set.Parse({"--shuffle", "-1"}).ok());
  EXPECT_EQ(off.overrides.shuffle_shards, false);
  EXPECT_EQ(off.overrides.shuffle_buffer, 0);
  JobFlags next;
  ASSERT_TRUE(next.set.Parse({"--shuffle", "-b", "4"}).ok());
  EXPECT_EQ(next.overrides.shuffle_shards, true);
  EXPECT_EQ(next.overrides.batch_size, 4);
  JobFlags shards;
  ASSERT_TRUE(shards.set.Parse({"--shuffle-shards"}).ok());
  EXPECT_EQ(shards.overrides.shuffle_shards, true);
}

TEST(JobFlagsTest, Errors) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{"--transform", "bogus"},
            "--transform: unknown transform 'bogus': expected center or random"},
           {{"--split", "node"}, "--split: unknown split 'node': expected shard or sample"},
           {{"--remainder", "keep"}, "--remainder: unknown remainder 'keep': expected drop or pad"},
           {{"--crop", "0"}, "--crop takes an integer in [1, 8192], got '0'"},
           {{"-b", "0"}, "-b takes an integer in [1, 65536], got '0'"},
           {{"--workers", "2000"}, "--workers takes an integer in [1, 1024], got '2000'"},
           {{"--shuffle", "x"}, "--shuffle takes an integer <= 16777216, got 'x'"},
           {{"--shuffle-buffer", "-1"},
            "--shuffle-buffer takes an integer in [0, 16777216], got '-1'"},
       }) {
    JobFlags f;
    const absl::Status s = f.set.Parse(c.args);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.args[0];
    EXPECT_EQ(std::string(s.message()), c.message) << c.args[0];
  }
}

TEST(JobFlagsTest, HelpShowsEveryFlagAndDefault) {
  JobFlags f;
  const std::string help = f.set.Help();
  for (const char* name :
       {"--batch-size, -b, --batch_size B", "--split shard|sample", "--remainder drop|pad",
        "--workers, -w, --num_workers K", "--seed S", "--shuffle [N]", "--shuffle-shards",
        "--shuffle-buffer N", "--block-size N", "--transform center|random", "--resize N",
        "--crop N", "--fields LIST", "--no-image"}) {
    EXPECT_THAT(help, HasSubstr(name));
  }
  EXPECT_THAT(help, HasSubstr("per-rank batch size (default 32)"));
  EXPECT_THAT(help, HasSubstr("(default 224)"));
  EXPECT_THAT(help, HasSubstr("(default center)"));
}

TEST(JobFlagsTest, FieldsAndNoImage) {
  JobFlags f;
  ASSERT_TRUE(f.set.Parse({"--fields", "txt,json?,jpg;png", "--no-image"}).ok());
  ASSERT_TRUE(f.overrides.fields.has_value());
  EXPECT_EQ(FieldSpecsString(*f.overrides.fields), "txt,json?,jpg;png");
  EXPECT_EQ(f.overrides.image, false);

  JobFlags unset;
  ASSERT_TRUE(unset.set.Parse({"-b", "4"}).ok());
  EXPECT_FALSE(unset.overrides.fields.has_value());
  EXPECT_FALSE(unset.overrides.image.has_value());

  // A bad spec names the flag and the spec; a repeated name is refused.
  JobFlags bad;
  const absl::Status status = bad.set.Parse({"--fields", "txt,a/b"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("--fields"));
  EXPECT_THAT(status.message(), HasSubstr("a/b"));
  JobFlags twice;
  EXPECT_FALSE(twice.set.Parse({"--fields", "txt,txt"}).ok());
  JobFlags valued;
  EXPECT_FALSE(valued.set.Parse({"--no-image=true"}).ok());
}

}  // namespace
}  // namespace shardcast
