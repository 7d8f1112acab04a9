// Implementation of shardcast-ctl's per-subcommand flag parser.
#include "client/ctl/flag_parser.h"

#include <cmath>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace shardcast::ctl {

void FlagParser::AddString(const std::string& name, const std::string& value_name, std::string* dst,
                           const std::string& help, bool allow_empty) {
  flags_.push_back({name, value_name, Kind::kString, dst, help, *dst, allow_empty});
}

void FlagParser::AddPositiveDouble(const std::string& name, const std::string& value_name,
                                   double* dst, const std::string& help) {
  flags_.push_back({name, value_name, Kind::kPositiveDouble, dst, help, absl::StrCat(*dst)});
}

void FlagParser::AddBool(const std::string& name, bool* dst, const std::string& help) {
  flags_.push_back({name, "", Kind::kBool, dst, help, *dst ? "true" : ""});
}

void FlagParser::AddCustom(const std::string& name, const std::string& value_name,
                           const std::string& help,
                           std::function<absl::Status(const std::string& value)> assign) {
  Flag flag{name, value_name, Kind::kCustom, nullptr, help, ""};
  flag.assign = std::move(assign);
  flags_.push_back(std::move(flag));
}

absl::Status FlagParser::Assign(Flag& flag, const std::string& value) {
  switch (flag.kind) {
    case Kind::kCustom:
      return flag.assign(value);
    case Kind::kString:
      if (value.empty() && !flag.allow_empty) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", flag.name, " needs a non-empty ", flag.value_name));
      }
      *static_cast<std::string*>(flag.dst) = value;
      return absl::OkStatus();
    case Kind::kPositiveDouble: {
      double v = 0;
      if (!absl::SimpleAtod(value, &v) || !std::isfinite(v) || v <= 0) {
        return absl::InvalidArgumentError(absl::StrCat("--", flag.name, " wants a number > 0 (",
                                                       flag.value_name, "), got '", value, "'"));
      }
      *static_cast<double*>(flag.dst) = v;
      return absl::OkStatus();
    }
    case Kind::kBool: {
      bool v = false;
      if (!absl::SimpleAtob(value, &v)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", flag.name, " wants true or false, got '", value, "'"));
      }
      *static_cast<bool*>(flag.dst) = v;
      return absl::OkStatus();
    }
  }
  return absl::InternalError("unknown flag kind");
}

absl::Status FlagParser::Parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      continue;
    }
    if (positional_ != nullptr && (arg.empty() || arg[0] != '-' || arg == "-")) {
      positional_->push_back(arg);
      continue;
    }
    if (!absl::StartsWith(arg, "--") || arg.size() == 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", arg, "' (flags are --name VALUE)"));
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
      has_value = true;
    }
    Flag* flag = nullptr;
    for (Flag& f : flags_) {
      if (f.name == name) flag = &f;
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    if (flag->seen) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " given twice"));
    }
    flag->seen = true;
    if (!has_value) {
      if (flag->kind == Kind::kBool) {
        *static_cast<bool*>(flag->dst) = true;
        continue;
      }
      // A following flag is never taken as a value: `--server --json` is a
      // missing address, not the address "--json".
      if (i + 1 >= args.size() || absl::StartsWith(args[i + 1], "--")) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, " needs a value (", flag->value_name, ")"));
      }
      value = args[++i];
    }
    if (absl::Status s = Assign(*flag, value); !s.ok()) return s;
  }
  return absl::OkStatus();
}

std::string FlagParser::FlagsHelp() const {
  std::string out;
  for (const Flag& f : flags_) {
    std::string left = absl::StrCat("--", f.name);
    if (!f.value_name.empty()) absl::StrAppend(&left, " ", f.value_name);
    absl::StrAppendFormat(&out, "  %-22s %s", left, f.help);
    if (!f.default_text.empty()) absl::StrAppend(&out, " (default ", f.default_text, ")");
    absl::StrAppend(&out, "\n");
  }
  absl::StrAppendFormat(&out, "  %-22s %s\n", "--help", "print this help and exit");
  return out;
}

}  // namespace shardcast::ctl
