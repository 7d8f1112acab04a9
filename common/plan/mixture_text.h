// A mixture as text, the spelling of the command-line clients' --mix (shardcast-train,
// shardcast-ctl plan): "laion=0.7,coco=0.3" for constant weights, or a schedule of
// points "STEP:NAME=W,...", separated by ';': "0:a=0.9,b=0.1;5000:a=0.5,b=0.5".
#ifndef SHARDCAST_COMMON_PLAN_MIXTURE_TEXT_H_
#define SHARDCAST_COMMON_PLAN_MIXTURE_TEXT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/plan/mixture_plan.h"

namespace shardcast {

// The points of `text`; INVALID_ARGUMENT naming what is not understood (a weight that
// is not a number, a name without '=', a step that is not an integer, no point). Whether
// the weights make a mixture (signs, sums, names) is the server's to check.
absl::StatusOr<std::vector<MixturePoint>> ParseMixtureText(absl::string_view text);

// The points of the JSON document `json` (the file's forms above); INVALID_ARGUMENT naming
// what is wrong: JSON that does not parse (with the byte offset), a point that is not an
// object with an integer "step" and an object "weights" of numbers, an unknown key of a
// point, a name given twice in one point, no point.
absl::StatusOr<std::vector<MixturePoint>> ParseMixtureJson(absl::string_view json);

// The value of a --mix flag: the JSON file it names when it ends in ".json" or names an
// existing file (read with ReadRegularFile, at most 1 MiB; errors name the file), else
// the text form.
absl::StatusOr<std::vector<MixturePoint>> ParseMixtureFlag(const std::string& value);

// `points` in ParseMixtureText's spelling (weights with %.6g; no step for one point at 0).
std::string MixtureText(const std::vector<MixturePoint>& points);

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_PLAN_MIXTURE_TEXT_H_
