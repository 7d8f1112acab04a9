// A mixture as text (see mixture_text.h).
#include "common/plan/mixture_text.h"

#include <filesystem>
#include <set>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/util/json_fields.h"
#include "common/util/regular_file.h"

namespace shardcast {

absl::StatusOr<std::vector<MixturePoint>> ParseMixtureText(absl::string_view text) {
  std::vector<MixturePoint> points;
  for (absl::string_view part : absl::StrSplit(text, ';', absl::SkipWhitespace())) {
    part = absl::StripAsciiWhitespace(part);
    MixturePoint point;
    const size_t colon = part.find(':');
    if (colon != absl::string_view::npos) {
      absl::string_view step = absl::StripAsciiWhitespace(part.substr(0, colon));
      if (!absl::SimpleAtoi(step, &point.step)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "mix: '", step, "' is not a step (an integer) in '", part, "' (STEP:NAME=W,...)"));
      }
      part = part.substr(colon + 1);
    }
    for (absl::string_view pair : absl::StrSplit(part, ',', absl::SkipWhitespace())) {
      const size_t eq = pair.find('=');
      if (eq == absl::string_view::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("mix: '", pair, "' is not NAME=WEIGHT (e.g. laion=0.7)"));
      }
      const std::string name(absl::StripAsciiWhitespace(pair.substr(0, eq)));
      double weight = 0;
      if (!absl::SimpleAtod(absl::StripAsciiWhitespace(pair.substr(eq + 1)), &weight)) {
        return absl::InvalidArgumentError(absl::StrCat("mix: the weight of '", name, "' ('",
                                                       pair.substr(eq + 1), "') is not a number"));
      }
      point.weights.emplace_back(name, weight);
    }
    points.push_back(std::move(point));
  }
  if (points.empty()) {
    return absl::InvalidArgumentError(
        "mix: no weights (NAME=W,... or a schedule STEP:NAME=W,...;STEP:...)");
  }
  return points;
}

namespace {

// A schedule file is a few points; a larger one is a mistake (a dataset, a log).
constexpr int64_t kMaxMixtureFileBytes = 1 << 20;

const char* KindName(JsonValue::Kind kind) {
  switch (kind) {
    case JsonValue::Kind::kNull:
      return "null";
    case JsonValue::Kind::kBool:
      return "a boolean";
    case JsonValue::Kind::kInteger:
    case JsonValue::Kind::kNumber:
      return "a number";
    case JsonValue::Kind::kString:
      return "a string";
    case JsonValue::Kind::kObject:
      return "an object";
    case JsonValue::Kind::kArray:
      return "an array";
  }
  return "a value";
}

// {"name": weight, ...} -> point->weights, in the document's order.
absl::Status WeightsFromJson(const JsonTree& object, absl::string_view where, MixturePoint* point) {
  if (object.value.kind != JsonValue::Kind::kObject) {
    return absl::InvalidArgumentError(absl::StrCat("mix: ", where, ": the weights are ",
                                                   KindName(object.value.kind),
                                                   ", not an object {\"NAME\": WEIGHT, ...}"));
  }
  std::set<std::string> seen;
  for (const JsonTree& member : object.children) {
    if (member.value.kind != JsonValue::Kind::kInteger &&
        member.value.kind != JsonValue::Kind::kNumber) {
      return absl::InvalidArgumentError(
          absl::StrCat("mix: ", where, ": the weight of '", member.key, "' is ",
                       KindName(member.value.kind), ", not a number"));
    }
    // JSON's duplicate keys silently keep one value elsewhere; in a recipe a repeated
    // name is a typo, so it is refused rather than guessed.
    if (!seen.insert(member.key).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("mix: ", where, ": '", member.key, "' is named twice"));
    }
    point->weights.emplace_back(member.key, member.value.number);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<MixturePoint>> ParseMixtureJson(absl::string_view json) {
  absl::StatusOr<JsonTree> tree = ParseJsonTree(json);
  if (!tree.ok()) return absl::InvalidArgumentError(absl::StrCat("mix: ", tree.status().message()));
  std::vector<MixturePoint> points;
  if (tree->value.kind == JsonValue::Kind::kObject) {
    MixturePoint point;
    if (absl::Status s = WeightsFromJson(*tree, "constant weights", &point); !s.ok()) return s;
    points.push_back(std::move(point));
  } else if (tree->value.kind == JsonValue::Kind::kArray) {
    for (size_t p = 0; p < tree->children.size(); ++p) {
      const JsonTree& entry = tree->children[p];
      const std::string where = absl::StrCat("point ", p);
      if (entry.value.kind != JsonValue::Kind::kObject) {
        return absl::InvalidArgumentError(
            absl::StrCat("mix: ", where, " is ", KindName(entry.value.kind),
                         ", not an object {\"step\": N, \"weights\": {\"NAME\": WEIGHT, ...}}"));
      }
      MixturePoint point;
      bool has_step = false;
      bool has_weights = false;
      for (const JsonTree& member : entry.children) {
        if (member.key == "step") {
          if (member.value.kind != JsonValue::Kind::kInteger) {
            return absl::InvalidArgumentError(absl::StrCat(
                "mix: ", where, ": \"step\" is ", KindName(member.value.kind),
                member.value.kind == JsonValue::Kind::kNumber ? " with a fraction" : "",
                ", not an integer"));
          }
          point.step = member.value.integer;
          has_step = true;
        } else if (member.key == "weights") {
          point.weights.clear();
          if (absl::Status s = WeightsFromJson(member, where, &point); !s.ok()) return s;
          has_weights = true;
        } else {
          return absl::InvalidArgumentError(
              absl::StrCat("mix: ", where, ": unknown key '", member.key,
                           "' (a point has \"step\" and \"weights\")"));
        }
      }
      if (!has_step || !has_weights) {
        return absl::InvalidArgumentError(
            absl::StrCat("mix: ", where, " has no \"", has_step ? "weights" : "step", "\""));
      }
      points.push_back(std::move(point));
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "mix: the document is ", KindName(tree->value.kind),
        ", not a schedule [{\"step\": N, \"weights\": {...}}, ...] or weights {\"NAME\": W, ...}"));
  }
  if (points.empty()) return absl::InvalidArgumentError("mix: the schedule has no point");
  return points;
}

absl::StatusOr<std::vector<MixturePoint>> ParseMixtureFlag(const std::string& value) {
  std::error_code ec;
  // The text form never ends in ".json" (a weight ends it), nor names a file: either
  // says that a file is meant, so a missing one is an error rather than bad text.
  if (!absl::EndsWith(value, ".json") && !std::filesystem::is_regular_file(value, ec)) {
    return ParseMixtureText(value);
  }
  absl::StatusOr<std::string> json = ReadRegularFile(value, kMaxMixtureFileBytes);
  if (!json.ok()) {
    return absl::Status(json.status().code(),
                        absl::StrCat("mix: ", value, ": ", json.status().message()));
  }
  absl::StatusOr<std::vector<MixturePoint>> points = ParseMixtureJson(*json);
  if (!points.ok()) {
    // "mix: FILE: what", the file named where the text form names its part.
    return absl::InvalidArgumentError(
        absl::StrCat("mix: ", value, ": ", absl::StripPrefix(points.status().message(), "mix: ")));
  }
  return points;
}

std::string MixtureText(const std::vector<MixturePoint>& points) {
  std::string out;
  for (size_t p = 0; p < points.size(); ++p) {
    if (p > 0) out += ';';
    if (points.size() > 1 || points[p].step != 0) absl::StrAppend(&out, points[p].step, ":");
    for (size_t i = 0; i < points[p].weights.size(); ++i) {
      absl::StrAppend(&out, i > 0 ? "," : "", points[p].weights[i].first, "=",
                      absl::StrFormat("%.6g", points[p].weights[i].second));
    }
  }
  return out;
}

}  // namespace shardcast
