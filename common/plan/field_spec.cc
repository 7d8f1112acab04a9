// Parsing and spelling of field specs (see field_spec.h).
#include "common/plan/field_spec.h"

#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace shardcast {
namespace {

absl::Status BadSpec(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("field '", absl::CHexEscape(text.substr(0, kMaxFieldSpecLength)), "': ", why));
}

// One extension: dot-separated non-empty components of printable ASCII without '/'
// (a tar member's name gives no other; '/' would belong to the key).
absl::Status CheckExtension(absl::string_view spec, absl::string_view ext) {
  if (ext.empty()) return BadSpec(spec, "an empty extension");
  for (char c : ext) {
    if (c < 0x21 || c > 0x7e) return BadSpec(spec, "a character outside printable ASCII");
    if (c == '/') return BadSpec(spec, "a '/' (an extension never holds one)");
    if (c == ';' || c == '?' || c == ',') return BadSpec(spec, "a misplaced ';', '?' or ','");
  }
  for (absl::string_view component : absl::StrSplit(ext, '.')) {
    if (component.empty()) {
      return BadSpec(spec, absl::StrCat("an empty component in '", ext, "'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string FieldSpec::Name() const { return absl::StrJoin(alternatives, ";"); }

std::string FieldSpec::ToString() const { return absl::StrCat(Name(), optional ? "?" : ""); }

absl::StatusOr<FieldSpec> ParseFieldSpec(absl::string_view text) {
  if (text.empty()) return BadSpec(text, "empty");
  if (text.size() > kMaxFieldSpecLength) {
    return BadSpec(
        text, absl::StrCat("longer than ", kMaxFieldSpecLength, " characters (", text.size(), ")"));
  }
  FieldSpec spec;
  absl::string_view names = text;
  if (names.back() == '?') {
    spec.optional = true;
    names.remove_suffix(1);
  }
  std::set<std::string> seen;
  for (absl::string_view alternative : absl::StrSplit(names, ';')) {
    absl::Status valid = CheckExtension(text, alternative);
    if (!valid.ok()) return valid;
    std::string lower = absl::AsciiStrToLower(alternative);
    if (!seen.insert(lower).second) {
      return BadSpec(text, absl::StrCat("'", lower, "' given twice"));
    }
    spec.alternatives.push_back(std::move(lower));
  }
  return spec;
}

absl::StatusOr<std::vector<FieldSpec>> ParseFieldSpecs(const std::vector<std::string>& texts) {
  if (texts.size() > kMaxFields) {
    return absl::InvalidArgumentError(absl::StrCat("fields: ", texts.size(), " asked for, at most ",
                                                   kMaxFields, " are allowed per job"));
  }
  std::vector<FieldSpec> specs;
  std::set<std::string> names;
  for (const std::string& text : texts) {
    absl::StatusOr<FieldSpec> spec = ParseFieldSpec(text);
    if (!spec.ok()) return spec.status();
    if (!names.insert(spec->Name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("fields: '", spec->Name(), "' asked for twice"));
    }
    specs.push_back(*std::move(spec));
  }
  return specs;
}

std::string FieldSpecsString(const std::vector<FieldSpec>& fields) {
  return absl::StrJoin(fields, ",", [](std::string* out, const FieldSpec& spec) {
    absl::StrAppend(out, spec.ToString());
  });
}

absl::StatusOr<std::vector<FieldSpec>> ParseFieldSpecList(absl::string_view comma_separated) {
  if (comma_separated.empty()) return std::vector<FieldSpec>();
  std::vector<std::string> texts = absl::StrSplit(comma_separated, ',');
  return ParseFieldSpecs(texts);
}

}  // namespace shardcast
