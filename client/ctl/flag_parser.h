// A small per-subcommand flag parser for shardcast-ctl: every subcommand shares
// one binary, so flags are parsed locally instead of through global absl flags.
#ifndef SHARDCAST_CLIENT_CTL_FLAG_PARSER_H_
#define SHARDCAST_CLIENT_CTL_FLAG_PARSER_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace shardcast::ctl {

// Accepts `--name value`, `--name=value` and, for booleans, `--name`,
// `--name=true|false`. `--help`/`-h` sets help_requested(). Anything else
// (unknown flags, positional arguments, a missing or malformed value, a flag
// given twice) is an InvalidArgument naming the argument.
// The destination pointers must outlive Parse().
class FlagParser {
 public:
  FlagParser() = default;
  FlagParser(const FlagParser&) = delete;
  FlagParser& operator=(const FlagParser&) = delete;

  // `value_name` is shown in the usage line (e.g. "ADDR"); `*dst` holds the
  // default on entry and is shown when non-empty.
  // An empty value is an error unless `allow_empty`.
  void AddString(const std::string& name, const std::string& value_name, std::string* dst,
                 const std::string& help, bool allow_empty = false);
  // A finite number > 0 (timeouts, intervals).
  void AddPositiveDouble(const std::string& name, const std::string& value_name, double* dst,
                         const std::string& help);
  void AddBool(const std::string& name, bool* dst, const std::string& help);
  // An integer >= `min` that fits `Int`.
  template <typename Int>
  void AddInt(const std::string& name, const std::string& value_name, Int* dst, Int min,
              const std::string& help);
  // Any other value type: `assign` parses the text and stores it (or says why not).
  void AddCustom(const std::string& name, const std::string& value_name, const std::string& help,
                 std::function<absl::Status(const std::string& value)> assign);
  // Accept arguments that are not flags (e.g. a directory), collected in order into
  // `*dst`; without this, they are errors.
  void AcceptPositional(std::vector<std::string>* dst) { positional_ = dst; }

  absl::Status Parse(const std::vector<std::string>& args);

  bool help_requested() const { return help_requested_; }

  // One indented line per flag: name, value name, help and default.
  std::string FlagsHelp() const;

 private:
  enum class Kind { kString, kPositiveDouble, kBool, kCustom };
  struct Flag {
    std::string name;
    std::string value_name;
    Kind kind;
    void* dst;
    std::string help;
    std::string default_text;
    bool allow_empty = false;
    bool seen = false;
    std::function<absl::Status(const std::string&)> assign = nullptr;  // kCustom only
  };

  absl::Status Assign(Flag& flag, const std::string& value);

  std::vector<Flag> flags_;
  bool help_requested_ = false;
  std::vector<std::string>* positional_ = nullptr;
};

template <typename Int>
void FlagParser::AddInt(const std::string& name, const std::string& value_name, Int* dst, Int min,
                        const std::string& help) {
  AddCustom(name, value_name, help, [name, dst, min](const std::string& text) {
    // Wide enough for every Int we use, signed or not; range is checked against Int.
    using Wide = std::conditional_t<std::is_signed_v<Int>, int64_t, uint64_t>;
    Wide value = 0;
    if (!absl::SimpleAtoi(text, &value) || value < static_cast<Wide>(min) ||
        value > static_cast<Wide>(std::numeric_limits<Int>::max())) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " needs an integer >= ", min, ", got '", text, "'"));
    }
    *dst = static_cast<Int>(value);
    return absl::OkStatus();
  });
}

}  // namespace shardcast::ctl

#endif  // SHARDCAST_CLIENT_CTL_FLAG_PARSER_H_
