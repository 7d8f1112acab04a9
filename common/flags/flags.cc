// The one command-line parser (see flags.h).
#include "common/flags/flags.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace shardcast {
namespace {

// Help text starts in this column when the names fit before it, and is filled to
// stay within kHelpWidth columns (the project's 100).
constexpr size_t kHelpColumn = 28;
constexpr size_t kHelpWidth = 100;

constexpr char kDurationExamples[] = "e.g. 250ms, 30s, 5m, 1h30m; a bare number is seconds";
constexpr char kSizeExamples[] = "bytes, or e.g. 512KiB, 64MiB, 1.5G, 10MB";

// "-lr", "--x" and "-b" are flags; "-1", "-.5", "-0.5,0.5", "-" and "" are values.
bool LooksLikeFlag(absl::string_view arg) {
  return arg.size() >= 2 && arg[0] == '-' &&
         !absl::ascii_isdigit(static_cast<unsigned char>(arg[1])) && arg[1] != '.';
}

// "--crop takes an integer in [1, 8192], got '0'": the flag as typed, then the problem.
absl::Status FlagError(absl::string_view flag, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(flag, " ", what));
}

// "--grace-period: 'x' is not a duration ...": a helper's error, the flag named first.
absl::Status PrefixFlag(absl::string_view flag, const absl::Status& status) {
  return absl::InvalidArgumentError(absl::StrCat(flag, ": ", status.message()));
}

// Values in `arg` of a multi-value flag: its comma-separated pieces, at least one.
size_t CountPieces(absl::string_view arg) {
  size_t pieces = 0;
  for (absl::string_view unused : absl::StrSplit(arg, ',', absl::SkipEmpty())) {
    static_cast<void>(unused);
    ++pieces;
  }
  return std::max<size_t>(pieces, 1);
}

// "an integer >= 1", "an integer in [1, 65536]" or "an integer": the bounds that are
// tighter than the destination type's own.
template <typename T>
std::string IntegerRange(int64_t min, int64_t max) {
  const bool low = min > std::numeric_limits<T>::min();
  const bool high = max < std::numeric_limits<T>::max();
  if (low && high) return absl::StrCat("an integer in [", min, ", ", max, "]");
  if (low) return absl::StrCat("an integer >= ", min);
  if (high) return absl::StrCat("an integer <= ", max);
  return "an integer";
}

std::string NumberRange(double min, double max) {
  const bool low = std::isfinite(min);
  const bool high = std::isfinite(max);
  if (low && high) return absl::StrCat("a number in [", min, ", ", max, "]");
  if (low) return absl::StrCat("a number >= ", min);
  if (high) return absl::StrCat("a number <= ", max);
  return "a number";
}

absl::StatusOr<bool> ParseBoolValue(absl::string_view flag, absl::string_view text) {
  bool value = false;
  if (!absl::SimpleAtob(text, &value)) {
    return FlagError(flag, absl::StrCat("takes true or false, got '", text, "'"));
  }
  return value;
}

// An integer in [min, max] for a destination of type T.
template <typename T>
absl::StatusOr<T> ParseInt(absl::string_view flag, absl::string_view text, int64_t min,
                           int64_t max) {
  min = std::max<int64_t>(min, std::numeric_limits<T>::min());
  max = std::min<int64_t>(max, std::numeric_limits<T>::max());
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < min || value > max) {
    return FlagError(flag, absl::StrCat("takes ", IntegerRange<T>(min, max), ", got '", text, "'"));
  }
  return static_cast<T>(value);
}

absl::StatusOr<uint64_t> ParseUint64(absl::string_view flag, absl::string_view text) {
  uint64_t value = 0;
  if (!absl::SimpleAtoi(text, &value)) {
    return FlagError(flag, absl::StrCat("takes an integer >= 0, got '", text, "'"));
  }
  return value;
}

absl::StatusOr<double> ParseDouble(absl::string_view flag, absl::string_view text, double min,
                                   double max) {
  double value = 0;
  if (!absl::SimpleAtod(text, &value) || !std::isfinite(value) || value < min || value > max) {
    return FlagError(flag, absl::StrCat("takes ", NumberRange(min, max), ", got '", text, "'"));
  }
  return value;
}

absl::Status CheckChoice(absl::string_view flag, const std::vector<std::string>& choices,
                         absl::string_view value) {
  for (const std::string& c : choices) {
    if (value == c) return absl::OkStatus();
  }
  return FlagError(flag,
                   absl::StrCat("takes ", absl::StrJoin(choices, " or "), ", got '", value, "'"));
}

// The value of a switch: --name alone is true, --name=VALUE says which.
absl::StatusOr<bool> SwitchValue(absl::string_view flag, const std::vector<std::string>& values) {
  if (values.empty()) return true;
  return ParseBoolValue(flag, values[0]);
}

// The Apply of every typed helper: `parse(flag, values)` gives a StatusOr of the
// value, stored into *dst (the value's type, or a std::optional of it) when it is OK.
template <typename Dst, typename Parse>
FlagSet::Apply ParsedInto(Dst* dst, Parse parse) {
  return [dst, parse = std::move(parse)](const std::string& flag,
                                         const std::vector<std::string>& values) -> absl::Status {
    auto value = parse(flag, values);
    if (!value.ok()) return value.status();
    *dst = *std::move(value);
    return absl::OkStatus();
  };
}

// The parser of an integer flag of type T in [min, max].
template <typename T>
auto IntegerIn(int64_t min, int64_t max) {
  return [min, max](absl::string_view flag, const std::vector<std::string>& values) {
    return ParseInt<T>(flag, values[0], min, max);
  };
}

// The parser of a flag whose one value `parse(text)` reads; its error gets the flag's
// name in front.
template <typename Parse>
auto PrefixedParser(Parse parse) {
  return [parse](absl::string_view flag, const std::vector<std::string>& values) {
    auto value = parse(values[0]);
    if (!value.ok()) return decltype(value)(PrefixFlag(flag, value.status()));
    return value;
  };
}

// Multiplier of a size suffix: K/M/G/T and KiB..TiB are binary, kB..TB decimal (the
// prefix letter in either case); "" and "B" are bytes. 0 = not a suffix.
int64_t SizeMultiplier(absl::string_view suffix) {
  if (suffix.empty() || suffix == "B" || suffix == "b") return 1;
  const size_t prefix =
      absl::string_view("kmgt").find(absl::ascii_tolower(static_cast<unsigned char>(suffix[0])));
  if (prefix == absl::string_view::npos) return 0;
  const int power = static_cast<int>(prefix) + 1;
  const absl::string_view rest = suffix.substr(1);
  int64_t base;
  if (rest.empty() || rest == "iB" || rest == "ib") {
    base = 1024;
  } else if (rest == "B" || rest == "b") {
    base = 1000;
  } else {
    return 0;
  }
  int64_t multiplier = 1;
  for (int i = 0; i < power; ++i) multiplier *= base;
  return multiplier;
}

// `text` filled into lines of at most `width` characters, breaking at spaces and
// newlines alike (a longer word gets a line of its own).
std::vector<std::string> WrapLines(absl::string_view text, size_t width) {
  std::vector<std::string> out;
  std::string current;
  for (absl::string_view word : absl::StrSplit(text, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    if (!current.empty() && current.size() + 1 + word.size() > width) {
      out.push_back(std::move(current));
      current.clear();
    }
    absl::StrAppend(&current, current.empty() ? "" : " ", word);
  }
  out.push_back(std::move(current));
  return out;
}

}  // namespace

absl::StatusOr<absl::Duration> ParseFlagDuration(absl::string_view text) {
  const std::string t(absl::StripAsciiWhitespace(text));
  absl::Duration d;
  double seconds = 0;
  if (absl::SimpleAtod(t, &seconds)) {
    if (!std::isfinite(seconds) || seconds < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", text, "' is not a duration >= 0 (", kDurationExamples, ")"));
    }
    d = absl::Seconds(seconds);
  } else if (t.empty() || !absl::ParseDuration(t, &d) || d == absl::InfiniteDuration() ||
             d < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not a duration >= 0 (", kDurationExamples, ")"));
  }
  return d;
}

absl::StatusOr<int64_t> ParseFlagSize(absl::string_view text) {
  const absl::string_view t = absl::StripAsciiWhitespace(text);
  const size_t number_end = t.find_first_not_of("0123456789.");
  const absl::string_view number = t.substr(0, number_end);
  const absl::string_view suffix =
      number_end == absl::string_view::npos ? absl::string_view() : t.substr(number_end);
  const size_t dot = number.find('.');
  const absl::string_view whole = number.substr(0, dot);
  const absl::string_view fraction =
      dot == absl::string_view::npos ? absl::string_view() : number.substr(dot + 1);
  const int64_t multiplier = SizeMultiplier(suffix);
  if (number.empty() || number == "." || multiplier == 0 ||
      fraction.find('.') != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not a size (", kSizeExamples, ")"));
  }
  // Exact arithmetic: whole * multiplier + fraction * multiplier / 10^digits, the
  // fractional byte dropped. 128 bits hold every intermediate of an int64 result.
  constexpr unsigned __int128 kMax = std::numeric_limits<int64_t>::max();
  const std::string too_large = absl::StrCat("'", text, "' is too large (at most ",
                                             std::numeric_limits<int64_t>::max(), " bytes)");
  unsigned __int128 bytes = 0;
  for (char c : whole) {
    bytes = bytes * 10 + static_cast<unsigned>(c - '0');
    if (bytes > kMax) return absl::InvalidArgumentError(too_large);
  }
  bytes *= static_cast<unsigned __int128>(multiplier);
  unsigned __int128 numerator = 0;
  unsigned __int128 denominator = 1;
  // Digits past the 18th cannot change a result below 2^63 by a whole byte.
  for (char c : fraction.substr(0, 18)) {
    numerator = numerator * 10 + static_cast<unsigned>(c - '0');
    denominator *= 10;
  }
  bytes += numerator * static_cast<unsigned __int128>(multiplier) / denominator;
  if (bytes > kMax) return absl::InvalidArgumentError(too_large);
  return static_cast<int64_t>(bytes);
}

std::string FormatFlagDuration(absl::Duration d) { return absl::FormatDuration(d); }

std::string FormatFlagSize(int64_t bytes) {
  if (bytes <= 0) return absl::StrCat(bytes);
  static constexpr const char* kUnits[] = {"TiB", "GiB", "MiB", "KiB", "TB", "GB", "MB", "kB"};
  static constexpr int64_t kMultipliers[] = {
      int64_t{1} << 40, int64_t{1} << 30, int64_t{1} << 20, int64_t{1} << 10,
      1000000000000,    1000000000,       1000000,          1000};
  for (size_t i = 0; i < std::size(kUnits); ++i) {
    if (bytes % kMultipliers[i] == 0) return absl::StrCat(bytes / kMultipliers[i], kUnits[i]);
  }
  return absl::StrCat(bytes);
}

void FlagSet::Section(std::string title) { sections_.push_back(std::move(title)); }

void FlagSet::Add(Spec spec, int arity, Apply apply) {
  Flag flag;
  flag.spec = std::move(spec);
  flag.arity = arity;
  flag.apply = std::move(apply);
  flag.section = sections_.size() - 1;
  flags_.push_back(std::move(flag));
}

void FlagSet::AddTyped(Spec spec, std::string shown_default, int arity, Apply apply) {
  if (spec.default_text.empty()) spec.default_text = std::move(shown_default);
  Add(std::move(spec), arity, std::move(apply));
}

void FlagSet::String(Spec spec, std::string* dst, bool allow_empty) {
  if (spec.value_name.empty()) spec.value_name = "VALUE";
  const std::string value_name = spec.value_name;
  AddTyped(std::move(spec), *dst, 1,
           [dst, allow_empty, value_name](const std::string& flag,
                                          const std::vector<std::string>& values) {
             if (values[0].empty() && !allow_empty) {
               return FlagError(flag, absl::StrCat("needs a non-empty ", value_name));
             }
             *dst = values[0];
             return absl::OkStatus();
           });
}

void FlagSet::Bool(Spec spec, bool* dst) {
  spec.value_name.clear();
  AddTyped(std::move(spec), *dst ? "true" : "", 0, ParsedInto(dst, SwitchValue));
}

void FlagSet::Int(Spec spec, int32_t* dst, int64_t min, int64_t max) {
  if (spec.value_name.empty()) spec.value_name = "N";
  AddTyped(std::move(spec), absl::StrCat(*dst), 1, ParsedInto(dst, IntegerIn<int32_t>(min, max)));
}

void FlagSet::Int64(Spec spec, int64_t* dst, int64_t min, int64_t max) {
  if (spec.value_name.empty()) spec.value_name = "N";
  AddTyped(std::move(spec), absl::StrCat(*dst), 1, ParsedInto(dst, IntegerIn<int64_t>(min, max)));
}

void FlagSet::Uint64(Spec spec, uint64_t* dst) {
  if (spec.value_name.empty()) spec.value_name = "N";
  AddTyped(std::move(spec), absl::StrCat(*dst), 1,
           ParsedInto(dst, [](absl::string_view flag, const std::vector<std::string>& values) {
             return ParseUint64(flag, values[0]);
           }));
}

void FlagSet::Double(Spec spec, double* dst, double min, double max) {
  if (spec.value_name.empty()) spec.value_name = "X";
  AddTyped(
      std::move(spec), absl::StrCat(*dst), 1,
      ParsedInto(dst, [min, max](absl::string_view flag, const std::vector<std::string>& values) {
        return ParseDouble(flag, values[0], min, max);
      }));
}

void FlagSet::Duration(Spec spec, absl::Duration* dst) {
  if (spec.value_name.empty()) spec.value_name = "DURATION";
  AddTyped(std::move(spec), FormatFlagDuration(*dst), 1,
           ParsedInto(dst, PrefixedParser(ParseFlagDuration)));
}

void FlagSet::Size(Spec spec, int64_t* dst) {
  if (spec.value_name.empty()) spec.value_name = "SIZE";
  AddTyped(std::move(spec), FormatFlagSize(*dst), 1,
           ParsedInto(dst, PrefixedParser(ParseFlagSize)));
}

void FlagSet::Choice(Spec spec, std::vector<std::string> choices, std::string* dst) {
  if (spec.value_name.empty()) spec.value_name = absl::StrJoin(choices, "|");
  AddTyped(std::move(spec), *dst, 1,
           [dst, choices = std::move(choices)](const std::string& flag,
                                               const std::vector<std::string>& values) {
             if (absl::Status s = CheckChoice(flag, choices, values[0]); !s.ok()) return s;
             *dst = values[0];
             return absl::OkStatus();
           });
}

void FlagSet::DoubleList(Spec spec, size_t count, std::vector<double>* dst) {
  if (spec.value_name.empty()) {
    std::vector<std::string> names(count, "X");
    spec.value_name = absl::StrJoin(names, " ");
  }
  AddTyped(std::move(spec), absl::StrJoin(*dst, " "), static_cast<int>(count),
           [dst, count](const std::string& flag, const std::vector<std::string>& values) {
             std::vector<std::string> parts;
             for (const std::string& v : values) {
               for (absl::string_view p : absl::StrSplit(v, ',', absl::SkipEmpty())) {
                 parts.emplace_back(p);
               }
             }
             if (parts.size() != count) {
               return FlagError(flag, absl::StrCat("takes ", count, " numbers, got ", parts.size(),
                                                   " ('", absl::StrJoin(values, " "), "')"));
             }
             std::vector<double> numbers;
             for (const std::string& p : parts) {
               double d = 0;
               if (!absl::SimpleAtod(p, &d) || !std::isfinite(d)) {
                 return FlagError(flag, absl::StrCat("takes numbers, got '", p, "'"));
               }
               numbers.push_back(d);
             }
             *dst = std::move(numbers);
             return absl::OkStatus();
           });
}

void FlagSet::OptionalInt(Spec spec, std::optional<int32_t>* dst, int64_t min, int64_t max) {
  if (spec.value_name.empty()) spec.value_name = "N";
  AddTyped(std::move(spec), "", 1, ParsedInto(dst, IntegerIn<int32_t>(min, max)));
}

void FlagSet::OptionalUint64(Spec spec, std::optional<uint64_t>* dst) {
  if (spec.value_name.empty()) spec.value_name = "N";
  AddTyped(std::move(spec), "", 1,
           ParsedInto(dst, [](absl::string_view flag, const std::vector<std::string>& values) {
             return ParseUint64(flag, values[0]);
           }));
}

void FlagSet::OptionalBool(Spec spec, std::optional<bool>* dst) {
  spec.value_name.clear();
  AddTyped(std::move(spec), "", 0, ParsedInto(dst, SwitchValue));
}

void FlagSet::OptionalChoice(Spec spec, std::vector<std::string> choices,
                             std::optional<std::string>* dst) {
  if (spec.value_name.empty()) spec.value_name = absl::StrJoin(choices, "|");
  AddTyped(std::move(spec), "", 1,
           [dst, choices = std::move(choices)](const std::string& flag,
                                               const std::vector<std::string>& values) {
             if (absl::Status s = CheckChoice(flag, choices, values[0]); !s.ok()) return s;
             *dst = values[0];
             return absl::OkStatus();
           });
}

void FlagSet::OptionalString(Spec spec, std::optional<std::string>* dst) {
  AddTyped(std::move(spec), "", 1,
           [dst](const std::string& flag, const std::vector<std::string>& values) {
             if (values[0].empty()) {
               return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
             }
             *dst = values[0];
             return absl::OkStatus();
           });
}

void FlagSet::AcceptPositional(std::vector<std::string>* dst) { positional_ = dst; }

FlagSet::Flag* FlagSet::Find(absl::string_view name) {
  for (Flag& flag : flags_) {
    for (const std::string& n : flag.spec.names) {
      if (n == name) return &flag;
    }
  }
  return nullptr;
}

bool FlagSet::Given(absl::string_view name) const {
  for (const Flag& flag : flags_) {
    if (flag.spec.names.front() == name) return flag.given;
  }
  return false;
}

absl::Status FlagSet::Parse(int argc, char** argv) {
  return Parse(std::vector<std::string>(argv + (argc > 0 ? 1 : 0), argv + argc));
}

absl::Status FlagSet::Parse(const std::vector<std::string>& args) {
  // --help wins over everything else on the line, so that it works on a command line
  // that would not parse (a user adding --help to a failing command).
  for (const std::string& arg : args) {
    if (arg == "--") break;
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      return absl::OkStatus();
    }
  }
  auto positional = [this](const std::string& arg) {
    if (positional_ == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", arg, "' (", program_, " takes only flags)"));
    }
    positional_->push_back(arg);
    return absl::OkStatus();
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      for (++i; i < args.size(); ++i) {
        if (absl::Status s = positional(args[i]); !s.ok()) return s;
      }
      break;
    }
    if (!LooksLikeFlag(arg)) {
      if (absl::Status s = positional(arg); !s.ok()) return s;
      continue;
    }
    std::string name = arg;
    std::optional<std::string> inline_value;
    if (const size_t eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      inline_value = arg.substr(eq + 1);
    }
    Flag* flag = Find(name);
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", name));
    }
    if (flag->given && !flag->spec.repeatable) {
      // Last-wins would silently drop a value the user typed (often an alias of the
      // other spelling); refusing says which one.
      return absl::InvalidArgumentError(absl::StrCat(
          name, " given twice (", absl::StrJoin(flag->spec.names, ", "), " are one flag)"));
    }
    flag->given = true;
    std::vector<std::string> values;
    if (inline_value.has_value()) {
      // For a switch (arity 0) this is its `=true|false`; a multi-value flag gets its
      // values comma-separated.
      values.push_back(*std::move(inline_value));
    } else if (flag->arity == kOptionalValue) {
      if (i + 1 < args.size() && !LooksLikeFlag(args[i + 1])) values.push_back(args[++i]);
    } else if (flag->arity > 0) {
      // N values as N arguments, or fewer arguments holding them comma-separated.
      size_t pieces = 0;
      while (pieces < static_cast<size_t>(flag->arity)) {
        if (i + 1 >= args.size() || LooksLikeFlag(args[i + 1])) {
          const std::string wanted = flag->spec.value_name.empty()
                                         ? std::string("a value")
                                         : absl::StrCat("a value (", flag->spec.value_name, ")");
          return FlagError(name, flag->arity == 1 ? absl::StrCat("needs ", wanted)
                                                  : absl::StrCat("needs ", flag->arity, " values (",
                                                                 flag->spec.value_name, ")"));
        }
        values.push_back(args[++i]);
        pieces += CountPieces(values.back());
      }
    }
    if (absl::Status s = flag->apply(name, values); !s.ok()) return s;
  }
  return absl::OkStatus();
}

std::string FlagSet::Help() const {
  auto append_flag = [](std::string* out, const std::string& names, const std::string& value_name,
                        const std::string& help, const std::string& default_text) {
    std::string left = absl::StrCat("  ", names);
    if (!value_name.empty()) absl::StrAppend(&left, " ", value_name);
    const std::vector<std::string> lines =
        WrapLines(default_text.empty() ? help : absl::StrCat(help, " (default ", default_text, ")"),
                  kHelpWidth - kHelpColumn);
    const std::string indent(kHelpColumn, ' ');
    if (left.size() + 1 <= kHelpColumn) {
      absl::StrAppend(out, left, std::string(kHelpColumn - left.size(), ' '), lines[0], "\n");
    } else {
      absl::StrAppend(out, left, "\n", indent, lines[0], "\n");
    }
    for (size_t i = 1; i < lines.size(); ++i) absl::StrAppend(out, indent, lines[i], "\n");
  };
  std::string out;
  for (size_t section = 0; section < sections_.size(); ++section) {
    bool titled = false;
    for (const Flag& flag : flags_) {
      if (flag.section != section) continue;
      if (!titled && !sections_[section].empty()) {
        absl::StrAppend(&out, out.empty() ? "" : "\n", sections_[section], "\n");
      }
      titled = true;
      append_flag(&out, absl::StrJoin(flag.spec.names, ", "), flag.spec.value_name, flag.spec.help,
                  flag.spec.default_text);
    }
  }
  append_flag(&out, "--help, -h", "", "print this help and exit", "");
  return out;
}

}  // namespace shardcast
