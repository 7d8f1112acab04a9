// A mixture as text (see mixture_text.h).
#include "common/plan/mixture_text.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

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
