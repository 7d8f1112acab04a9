// Names, limits, validation and fingerprint of the job config (see job_config.h).
#include "common/plan/job_config.h"

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace shardcast {
namespace {

// Per-sample bytes of a Batch message besides pixels (label, key, shard, flags) and
// the fixed part, counted generously when checking the message size limit.
constexpr int64_t kSampleOverheadBytes = 512;
constexpr int64_t kBatchOverheadBytes = 4096;

// The name of each enumerator; nullptr for a value that is none. The switches have no
// default, so -Wswitch flags an enumerator added without a name. The enumerators take
// the implicit values 0, 1, ... (no explicit ones), so walking up from 0 until a value
// has no name finds them all: parsing and the lists of names follow the switches.
const char* NameOrNull(Split split) {
  switch (split) {
    case Split::kShard:
      return "shard";
    case Split::kSample:
      return "sample";
  }
  return nullptr;
}
const char* NameOrNull(Remainder remainder) {
  switch (remainder) {
    case Remainder::kDrop:
      return "drop";
    case Remainder::kPad:
      return "pad";
  }
  return nullptr;
}
const char* NameOrNull(TransformMode mode) {
  switch (mode) {
    case TransformMode::kCenter:
      return "center";
    case TransformMode::kRandom:
      return "random";
  }
  return nullptr;
}

const char* NameOrNull(ImageDelivery delivery) {
  switch (delivery) {
    case ImageDelivery::kServer:
      return "server";
    case ImageDelivery::kEncoded:
      return "encoded";
  }
  return nullptr;
}

template <typename Enum>
std::vector<Enum> AllValues() {
  std::vector<Enum> values;
  for (int i = 0; NameOrNull(static_cast<Enum>(i)) != nullptr; ++i) {
    values.push_back(static_cast<Enum>(i));
  }
  return values;
}

template <typename Enum>
std::vector<std::string> AllNames() {
  std::vector<std::string> names;
  for (Enum value : AllValues<Enum>()) names.push_back(NameOrNull(value));
  return names;
}

template <typename Enum>
const char* NameOf(Enum value) {
  const char* name = NameOrNull(value);
  return name != nullptr ? name : "unknown";  // only a value cast from outside the enum
}

template <typename Enum>
absl::StatusOr<Enum> ParseName(const char* what, absl::string_view name) {
  for (Enum value : AllValues<Enum>()) {
    if (name == NameOrNull(value)) return value;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown ", what, " '", name, "': expected ",
                                                 absl::StrJoin(AllNames<Enum>(), " or ")));
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
std::vector<std::pair<const char*, std::string>> Settings(const JobConfig& config) {
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
      {"image", config.image ? "true" : "false"},
      {"fields", FieldSpecsString(config.fields)},
      {"delivery", ImageDeliveryName(config.delivery)},
  };
}

}  // namespace

const char* SplitName(Split split) { return NameOf(split); }
const char* RemainderName(Remainder remainder) { return NameOf(remainder); }
const char* TransformModeName(TransformMode mode) { return NameOf(mode); }
const char* ImageDeliveryName(ImageDelivery delivery) { return NameOf(delivery); }
absl::StatusOr<Split> ParseSplit(absl::string_view name) { return ParseName<Split>("split", name); }
absl::StatusOr<Remainder> ParseRemainder(absl::string_view name) {
  return ParseName<Remainder>("remainder", name);
}
absl::StatusOr<TransformMode> ParseTransformMode(absl::string_view name) {
  return ParseName<TransformMode>("transform", name);
}
absl::StatusOr<ImageDelivery> ParseImageDelivery(absl::string_view name) {
  return ParseName<ImageDelivery>("delivery", name);
}
std::vector<Split> AllSplits() { return AllValues<Split>(); }
std::vector<Remainder> AllRemainders() { return AllValues<Remainder>(); }
std::vector<TransformMode> AllTransformModes() { return AllValues<TransformMode>(); }
std::vector<std::string> SplitNames() { return AllNames<Split>(); }
std::vector<std::string> RemainderNames() { return AllNames<Remainder>(); }
std::vector<std::string> TransformModeNames() { return AllNames<TransformMode>(); }
std::vector<ImageDelivery> AllImageDeliveries() { return AllValues<ImageDelivery>(); }
std::vector<std::string> ImageDeliveryNames() { return AllNames<ImageDelivery>(); }

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
  if (o.image) base.image = *o.image;
  if (o.fields) base.fields = *o.fields;
  if (o.delivery) base.delivery = *o.delivery;
  return base;
}

int64_t BatchMessageBytes(const JobConfig& config) {
  const bool pixels = config.image && config.delivery == ImageDelivery::kServer;
  const int64_t sample_pixels =
      pixels ? int64_t{3} * config.transform.crop * config.transform.crop : 0;
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
  if (!config.image && config.fields.empty()) {
    return absl::InvalidArgumentError(
        "image: a job without images must ask for at least one field (e.g. fields txt)");
  }
  if (!config.image && config.delivery != ImageDelivery::kServer) {
    return absl::InvalidArgumentError(absl::StrCat(
        "delivery: ", ImageDeliveryName(config.delivery),
        " says where images are decoded, and this job has none (image false): leave it unset"));
  }
  if (config.fields.size() > kMaxFields) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fields: ", config.fields.size(), " asked for, at most ", kMaxFields, " are allowed"));
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

std::string ServeSettingsString(const ServeSettings& serve) {
  return absl::StrCat("max_member_bytes=", serve.max_member_bytes,
                      " max_decode_bytes=", serve.max_decode_bytes,
                      " max_pixels=", serve.max_pixels,
                      " resend_first_batch=", serve.resend_first_batch ? "true" : "false");
}

std::optional<ConfigDifference> FirstDifference(const JobConfig& a, const JobConfig& b) {
  const auto fields_a = Settings(a);
  const auto fields_b = Settings(b);
  for (size_t i = 0; i < fields_a.size(); ++i) {
    if (fields_a[i].second != fields_b[i].second) {
      return ConfigDifference{fields_a[i].first, fields_a[i].second, fields_b[i].second};
    }
  }
  return std::nullopt;
}

std::string JobConfigString(const JobConfig& config) {
  std::string out;
  for (const auto& [field, value] : Settings(config)) {
    absl::StrAppend(&out, out.empty() ? "" : " ", field, "=", value);
  }
  return out;
}

}  // namespace shardcast
