// The one command-line parser of every shardcast binary (server, trainer, ctl, pack).
// absl flags cannot take the seed's multi-value flags (`--betas 0.9 0.999`), optional
// values (`--shuffle [N]`) or single-dash aliases (`-lr`, `-b`), and global flags do
// not suit one binary with subcommands; this parser does all of it with local state.
//
// Syntax: `--name VALUE`, `--name=VALUE`, aliases as registered (`-b 32`); booleans
// `--name` or `--name=true|false`; `--help`/`-h` sets help_requested(). A value may
// start with '-' when a digit or '.' follows (`--shift -1`); anything else starting
// with '-' is taken as the next flag, never as a value. A flag of N values takes them
// as N arguments or comma-separated (`--betas 0.9 0.999`, `--betas=0.9,0.999`). `--`
// ends the flags. `--help` anywhere before `--` wins over every other argument.
// Durations: `250ms`, `30s`, `5m`, `1h30m` or a bare number of seconds. Sizes: bytes,
// or with KiB/MiB/GiB/TiB (also K/M/G/T, binary) or kB/MB/GB/TB (decimal). Errors are
// INVALID_ARGUMENT naming the flag as typed and what it needs.
#ifndef SHARDCAST_COMMON_FLAGS_FLAGS_H_
#define SHARDCAST_COMMON_FLAGS_FLAGS_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace shardcast {

// "30s", "5m", "1h30m", "250ms", "0", or a bare number of seconds ("2.5"). >= 0.
absl::StatusOr<absl::Duration> ParseFlagDuration(absl::string_view text);
// "4096", "512MiB", "4GiB", "1.5G", "10MB". >= 0, fits int64.
absl::StatusOr<int64_t> ParseFlagSize(absl::string_view text);
// "1.5s", "1h30m", "250ms"; "512MiB", "10MB" (the largest unit that divides exactly,
// else plain bytes). Both parse back to the same value.
std::string FormatFlagDuration(absl::Duration d);
std::string FormatFlagSize(int64_t bytes);

class FlagSet {
 public:
  // `names`: the canonical long name first ("--batch-size"), then aliases ("-b",
  // "--batch_size"). `value_name` is shown in help ("N", "HOST:PORT"). `help` is
  // running text (Help() fills it to the width; a newline in it is a space); the
  // default is shown after it when `default_text` is not empty.
  struct Spec {
    std::vector<std::string> names;
    std::string value_name;
    std::string help;
    std::string default_text = {};  // empty: the destination's value (typed helpers)
    // May be given several times (e.g. --dataset NAME=DIR); Apply sees each in turn.
    bool repeatable = false;
  };
  // Takes the flag's values (exactly `arity` of them; for an optional value 0 or 1)
  // and stores them, or says what is wrong. `flag` is the name as typed.
  using Apply =
      std::function<absl::Status(const std::string& flag, const std::vector<std::string>& values)>;

  explicit FlagSet(std::string program) : program_(std::move(program)) {}
  FlagSet(const FlagSet&) = delete;
  FlagSet& operator=(const FlagSet&) = delete;

  // Starts a titled group of flags in --help ("Data:", "Distributed:").
  void Section(std::string title);

  // The general form. arity > 0: exactly that many values; kOptionalValue: the next
  // argument is taken when it is not a flag; arity 0: a switch, whose `--name=VALUE`
  // passes VALUE (for `=true|false`).
  static constexpr int kOptionalValue = -1;
  void Add(Spec spec, int arity, Apply apply);

  // Typed helpers. Each stores into *dst (which must outlive Parse) and shows *dst as
  // the default unless the spec's default_text says otherwise.
  void String(Spec spec, std::string* dst, bool allow_empty = false);
  void Bool(Spec spec, bool* dst);  // --name, --name=true|false
  void Int(Spec spec, int32_t* dst, int64_t min = std::numeric_limits<int32_t>::min(),
           int64_t max = std::numeric_limits<int32_t>::max());
  void Int64(Spec spec, int64_t* dst, int64_t min = std::numeric_limits<int64_t>::min(),
             int64_t max = std::numeric_limits<int64_t>::max());
  void Uint64(Spec spec, uint64_t* dst);
  void Double(Spec spec, double* dst, double min = -std::numeric_limits<double>::infinity(),
              double max = std::numeric_limits<double>::infinity());
  void Duration(Spec spec, absl::Duration* dst);
  void Size(Spec spec, int64_t* dst);
  // One of `choices`; the value name defaults to "a|b|c".
  void Choice(Spec spec, std::vector<std::string> choices, std::string* dst);
  // `count` numbers as separate arguments or comma-separated ("0.9 0.999", "0.9,0.999").
  void DoubleList(Spec spec, size_t count, std::vector<double>* dst);
  // Optional-typed destinations: set only when the flag is given.
  void OptionalInt(Spec spec, std::optional<int32_t>* dst, int64_t min, int64_t max);
  void OptionalUint64(Spec spec, std::optional<uint64_t>* dst);
  void OptionalBool(Spec spec, std::optional<bool>* dst);
  void OptionalString(Spec spec, std::optional<std::string>* dst);  // a non-empty value
  void OptionalChoice(Spec spec, std::vector<std::string> choices, std::optional<std::string>* dst);

  // Arguments that are not flags are collected here in order; without this, they are
  // errors. `--` ends the flags: everything after it is positional.
  void AcceptPositional(std::vector<std::string>* dst);

  // Parses args (program name NOT included). A flag given twice (under any of its
  // names) is an error, unless its spec is repeatable. An unknown flag's error names
  // it and points at --help.
  absl::Status Parse(const std::vector<std::string>& args);
  absl::Status Parse(int argc, char** argv);  // skips argv[0]

  bool help_requested() const { return help_requested_; }
  // Whether the flag whose canonical name is `name` was given.
  bool Given(absl::string_view name) const;

  // "  --batch-size, -b N     per-rank batch size (default 32)" lines, by section,
  // then --help. Help text starts in one column (a long name list puts it on the next
  // line) and is filled into lines indented to that column, within 100 columns.
  std::string Help() const;

 private:
  struct Flag {
    Spec spec;
    int arity = 0;
    Apply apply;
    bool given = false;
    size_t section = 0;
  };
  Flag* Find(absl::string_view name);
  void AddTyped(Spec spec, std::string shown_default, int arity, Apply apply);

  std::string program_;
  std::vector<std::string> sections_ = {""};
  std::vector<Flag> flags_;
  std::vector<std::string>* positional_ = nullptr;
  bool help_requested_ = false;
};

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_FLAGS_FLAGS_H_
