// The job's flags, defined once for every binary that takes them: the server (its
// defaults for what a registration leaves unset) and the trainer (what it asks for).
// A new job setting is one entry here, one field in JobOverrides and one in the proto.
#ifndef SHARDCAST_COMMON_FLAGS_JOB_FLAGS_H_
#define SHARDCAST_COMMON_FLAGS_JOB_FLAGS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/flags/flags.h"
#include "common/plan/job_config.h"

namespace shardcast {

// Adds --batch-size (-b, --batch_size), --split, --remainder, --workers (-w,
// --num_workers), --seed, --shuffle [N] (the seed's: shard shuffle plus a buffer of N;
// negative = off), --shuffle-shards, --shuffle-buffer, --block-size, --transform,
// --resize, --crop, --fields LIST (field_spec.h's comma-separated specs) and --no-image
// to `flags`, each storing into `*overrides` when given.
// `defaults` is what an unset flag means, shown in --help.
// REQUIRES: `overrides` outlives flags->Parse().
void AddJobFlags(FlagSet* flags, const JobConfig& defaults, JobOverrides* overrides);

// Only --fields LIST and --no-image (AddJobFlags adds them too): for tools that select a
// job's samples without registering one (shardcast-ctl inspect and plan).
void AddFieldFlags(FlagSet* flags, const JobConfig& defaults, JobOverrides* overrides);
// The job those two flags describe (fields, image; the rest default), nullopt when
// neither was given. INVALID_ARGUMENT for --no-image without --fields.
absl::StatusOr<std::optional<JobConfig>> FieldJobFromFlags(const JobOverrides& overrides);

// The apply of a flag whose value is one of an enum's names (`parse` is ParseSplit,
// ParseRemainder or ParseTransformMode), stored parsed into `*dst` (an Enum or an
// std::optional<Enum>). Errors name the flag and the accepted values.
template <typename Enum, typename Dst>
FlagSet::Apply EnumFlag(absl::StatusOr<Enum> (*parse)(absl::string_view), Dst* dst) {
  return [parse, dst](const std::string& flag, const std::vector<std::string>& values) {
    absl::StatusOr<Enum> value = parse(values[0]);
    if (!value.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": ", value.status().message()));
    }
    *dst = *value;
    return absl::OkStatus();
  };
}

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_FLAGS_JOB_FLAGS_H_
