// Names, limits, validation and fingerprint of the job config (see job_config.h).
#include "common/job_config.h"

#include <iterator>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/digest.h"
#include "common/epoch_plan.h"

namespace shardcast {
namespace {

// Per-sample bytes of a Batch message besides pixels (label, key, shard, flags) and
// the fixed part, counted generously when checking the message size limit.
constexpr int64_t kSampleOverheadBytes = 512;
constexpr int64_t kBatchOverheadBytes = 4096;

constexpr const char* kSplitNames[] = {"shard", "sample"};
constexpr const char* kRemainderNames[] = {"drop", "pad"};
constexpr const char* kTransformModeNames[] = {"center", "random"};

template <typename Enum, size_t N>
absl::StatusOr<Enum> ParseName(const char* what, const char* const (&names)[N],
                               absl::string_view name) {
  for (size_t i = 0; i < N; ++i) {
    if (name == names[i]) return static_cast<Enum>(i);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown ", what, " '", name, "': expected ", absl::StrJoin(names, " or ")));
}

template <size_t N>
std::vector<std::string> AllNames(const char* const (&names)[N]) {
  return std::vector<std::string>(std::begin(names), std::end(names));
}

absl::Status InRange(const char* field, int64_t value, int64_t min, int64_t max,
                     absl::string_view hint = "") {
  if (value >= min && value <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", value, " is outside [", min, ", ",
                                                 max, "]", hint.empty() ? "" : " (", hint,
                                                 hint.empty() ? "" : ")"));
}

// The settings as (field, value) pairs, in wire spelling: the one list that the
// difference check and the config string walk.
std::vector<std::pair<const char*, std::string>> Fields(const JobConfig& config) {
  const PlanConfig& p = config.plan;
  const TransformSpec& t = config.transform;
  return {
      {"world_size", absl::StrCat(p.world_size)},
      {"batch_size", absl::StrCat(p.batch_size)},
      {"split", SplitName(p.split)},
      {"remainder", RemainderName(p.remainder)},
      {"workers", absl::StrCat(p.workers)},
      {"seed", absl::StrCat(p.seed)},
      {"shuffle_shards", p.shuffle_shards ? "true" : "false"},
      {"shuffle_buffer", absl::StrCat(p.shuffle_buffer)},
      {"block_size", absl::StrCat(p.block_size)},
      {"transform.mode", TransformModeName(t.mode)},
      {"transform.resize", absl::StrCat(t.resize)},
      {"transform.crop", absl::StrCat(t.crop)},
      {"transform.dct_scaling", t.dct_scaling ? "true" : "false"},
  };
}

}  // namespace

const char* SplitName(Split split) { return kSplitNames[static_cast<int>(split)]; }
const char* RemainderName(Remainder remainder) {
  return kRemainderNames[static_cast<int>(remainder)];
}
const char* TransformModeName(TransformMode mode) {
  return kTransformModeNames[static_cast<int>(mode)];
}
absl::StatusOr<Split> ParseSplit(absl::string_view name) {
  return ParseName<Split>("split", kSplitNames, name);
}
absl::StatusOr<Remainder> ParseRemainder(absl::string_view name) {
  return ParseName<Remainder>("remainder", kRemainderNames, name);
}
absl::StatusOr<TransformMode> ParseTransformMode(absl::string_view name) {
  return ParseName<TransformMode>("transform", kTransformModeNames, name);
}
std::vector<std::string> SplitNames() { return AllNames(kSplitNames); }
std::vector<std::string> RemainderNames() { return AllNames(kRemainderNames); }
std::vector<std::string> TransformModeNames() { return AllNames(kTransformModeNames); }

JobConfig ApplyOverrides(const JobOverrides& o, JobConfig base) {
  PlanConfig& p = base.plan;
  TransformSpec& t = base.transform;
  if (o.batch_size) p.batch_size = *o.batch_size;
  if (o.split) p.split = *o.split;
  if (o.remainder) p.remainder = *o.remainder;
  if (o.workers) p.workers = *o.workers;
  if (o.seed) p.seed = *o.seed;
  if (o.shuffle_shards) p.shuffle_shards = *o.shuffle_shards;
  if (o.shuffle_buffer) p.shuffle_buffer = *o.shuffle_buffer;
  if (o.block_size) p.block_size = *o.block_size;
  if (o.transform_mode) t.mode = *o.transform_mode;
  if (o.resize) t.resize = *o.resize;
  if (o.crop) t.crop = *o.crop;
  return base;
}

int64_t BatchMessageBytes(const JobConfig& config) {
  const int64_t sample_pixels = int64_t{3} * config.transform.crop * config.transform.crop;
  return int64_t{config.plan.batch_size} * (sample_pixels + kSampleOverheadBytes) +
         kBatchOverheadBytes;
}

absl::Status Validate(const JobConfig& config, const JobLimits& limits) {
  const PlanConfig& p = config.plan;
  const TransformSpec& t = config.transform;
  for (absl::Status status : {
           InRange("world_size", p.world_size, 1, kMaxWorldSize),
           InRange("batch_size", p.batch_size, 1, kMaxBatchSize),
           InRange("workers", p.workers, 1, kMaxWorkers),
           InRange("shuffle_buffer", p.shuffle_buffer, 0, kMaxShuffleBuffer),
           InRange("block_size", p.block_size, 0, std::numeric_limits<int32_t>::max()),
           InRange("transform.crop", t.crop, 1, kMaxCrop),
           // Checked for random mode too (where resize is unused) so that a value the
           // server would refuse in one mode is never silently carried in another.
           InRange("transform.resize", t.resize, 1, kMaxResize),
       }) {
    if (!status.ok()) return status;
  }
  if (t.mode == TransformMode::kCenter && t.resize < t.crop) {
    return absl::InvalidArgumentError(
        absl::StrCat("transform.resize: ", t.resize, " is smaller than transform.crop ", t.crop,
                     " (center mode resizes the short side, then crops)"));
  }
  const int64_t message_bytes = BatchMessageBytes(config);
  if (message_bytes > limits.max_message_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "batch_size: %d images of 3x%dx%d make a %d-byte message, above the server's "
        "max message size %d (lower batch_size or crop, or raise --max-message-size)",
        p.batch_size, t.crop, t.crop, message_bytes, limits.max_message_bytes));
  }
  return absl::OkStatus();
}

std::string JobFingerprint(absl::string_view index_fingerprint, const JobConfig& config) {
  // World and batch size fixed to 1: the plan digest then covers the data, the
  // planner version and every other (normalized) plan setting, and nothing else.
  PlanConfig plan = config.plan;
  plan.world_size = 1;
  plan.batch_size = 1;
  const TransformSpec& t = config.transform;
  Digest128 digest;
  digest.AddString("shardcast-job-v1");
  digest.AddString(PlanFingerprint(index_fingerprint, plan));
  digest.AddU64(kTransformVersion);
  digest.AddString(TransformModeName(t.mode));
  digest.AddU64(static_cast<uint64_t>(t.crop));
  // Random mode never reads resize: two random jobs that differ only there are the same.
  digest.AddU64(t.mode == TransformMode::kCenter ? static_cast<uint64_t>(t.resize) : 0);
  digest.AddU64(t.dct_scaling ? 1 : 0);
  return digest.Hex();
}

std::optional<ConfigDifference> FirstDifference(const JobConfig& a, const JobConfig& b) {
  const auto fields_a = Fields(a);
  const auto fields_b = Fields(b);
  for (size_t i = 0; i < fields_a.size(); ++i) {
    if (fields_a[i].second != fields_b[i].second) {
      return ConfigDifference{fields_a[i].first, fields_a[i].second, fields_b[i].second};
    }
  }
  return std::nullopt;
}

std::string JobConfigString(const JobConfig& config) {
  std::string out;
  for (const auto& [field, value] : Fields(config)) {
    absl::StrAppend(&out, out.empty() ? "" : " ", field, "=", value);
  }
  return out;
}

}  // namespace shardcast
