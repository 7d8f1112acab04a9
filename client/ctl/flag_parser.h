// A small per-subcommand flag parser for shardcast-ctl: every subcommand shares
// one binary, so flags are parsed locally instead of through global absl flags.
#ifndef SHARDCAST_CLIENT_CTL_FLAG_PARSER_H_
#define SHARDCAST_CLIENT_CTL_FLAG_PARSER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

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

  absl::Status Parse(const std::vector<std::string>& args);

  bool help_requested() const { return help_requested_; }

  // One indented line per flag: name, value name, help and default.
  std::string FlagsHelp() const;

 private:
  enum class Kind { kString, kPositiveDouble, kBool };
  struct Flag {
    std::string name;
    std::string value_name;
    Kind kind;
    void* dst;
    std::string help;
    std::string default_text;
    bool allow_empty = false;
    bool seen = false;
  };

  absl::Status Assign(Flag& flag, const std::string& value);

  std::vector<Flag> flags_;
  bool help_requested_ = false;
};

}  // namespace shardcast::ctl

#endif  // SHARDCAST_CLIENT_CTL_FLAG_PARSER_H_
