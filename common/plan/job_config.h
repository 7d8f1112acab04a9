// The job config: what a trainer asks the server for (how the data is split and
// dealt, how each image is transformed), with the one spelling of each enum value,
// every limit, and the job fingerprint that says "same batches, same bytes".
// The one home of these: flags, the wire mapping (proto/job_config_proto.h), the
// planner and the transform all take their names and limits from here.
#ifndef SHARDCAST_COMMON_PLAN_JOB_CONFIG_H_
#define SHARDCAST_COMMON_PLAN_JOB_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/plan/field_spec.h"

namespace shardcast {

// How samples are dealt to ranks; semantics in common/plan/epoch_plan.h.
enum class Split {
  kShard,   // webdataset split_by_node + DataLoader workers + repeat/slice
  kSample,  // exactly-once: per-epoch permutation dealt round-robin by batch
};
enum class Remainder {
  kDrop,  // n = N // (B*W)
  kPad,   // n = ceil(N / (B*W)), padding entries invalid (split kSample)
};
// What is done to each decoded image; semantics in common/image/image_transform.h.
enum class TransformMode {
  kCenter,  // Resize(short side = resize, bilinear, antialias) + CenterCrop(crop)
  kRandom,  // RandomResizedCrop(crop, scale=(0.08,1), ratio=(3/4,4/3)) + HFlip(p=0.5)
};
// Where a job's images are decoded (proto ImageDelivery).
enum class ImageDelivery {
  kServer,   // the server decodes and transforms; batches carry pixels
  kEncoded,  // batches carry each image as stored plus its transform's parameters
};

// Enumerators take the implicit values 0, 1, ...: job_config.cc finds them by walking
// up from 0 through its name switches (so add a name with a new enumerator; -Wswitch
// says where).
//
// The names used on flags, on the wire's logs, in refusals and in status output
// ("unknown" for a value that is no enumerator). Parse errors name the accepted values.
const char* SplitName(Split split);
const char* RemainderName(Remainder remainder);
const char* TransformModeName(TransformMode mode);
const char* ImageDeliveryName(ImageDelivery delivery);
absl::StatusOr<Split> ParseSplit(absl::string_view name);
absl::StatusOr<Remainder> ParseRemainder(absl::string_view name);
absl::StatusOr<TransformMode> ParseTransformMode(absl::string_view name);
absl::StatusOr<ImageDelivery> ParseImageDelivery(absl::string_view name);
// Every enumerator, in enum order.
std::vector<Split> AllSplits();
std::vector<Remainder> AllRemainders();
std::vector<TransformMode> AllTransformModes();
std::vector<ImageDelivery> AllImageDeliveries();
// Every accepted name, in enum order (for --help and choice flags).
std::vector<std::string> SplitNames();
std::vector<std::string> RemainderNames();
std::vector<std::string> TransformModeNames();
std::vector<std::string> ImageDeliveryNames();

struct PlanConfig {
  int32_t world_size = 1;
  int32_t batch_size = 1;
  Split split = Split::kShard;
  Remainder remainder = Remainder::kDrop;
  int32_t workers = 1;  // virtual DataLoader workers per rank (split kShard)
  uint64_t seed = 0;
  bool shuffle_shards = false;  // shard order shuffled by (seed, epoch)
  int32_t shuffle_buffer = 0;   // per-worker sample shuffle buffer (split kShard), 0 = off
  int32_t block_size = 0;       // shards per shuffle block (split kSample), 0 = global
};

struct TransformSpec {
  TransformMode mode = TransformMode::kCenter;
  int resize = 256;  // short side for kCenter (unused by kRandom)
  int crop = 224;    // output is crop x crop
  // Allow DCT-domain downscaling (1/2, 1/4, 1/8; never below what the crop needs).
  // Off by default: where it applies, the pixels differ from torchvision's by up to 44
  // levels at sharp edges (a box-like low-pass, not the triangle filter), outside the
  // conformance bound. The server's --dct-scaling turns it on for speed on big images.
  bool dct_scaling = false;
};

// Bump when image_transform's output bytes change for the same input and spec:
// the job fingerprint then changes, so no trainer resumes onto different pixels.
// 2: the fixed-point resampler (common/image/resample.cc) rounds differently from the float one.
inline constexpr int kTransformVersion = 2;

struct JobConfig {
  PlanConfig plan;
  TransformSpec transform;
  // Whether batches carry decoded images. false: a members-only job (text, audio,
  // tokens): nothing is decoded, `transform` is unused, `fields` is not empty.
  bool image = true;
  // The sample members each batch carries as stored in the tar, in this order
  // (field_spec.h). A sample without a required one is left out of the plan.
  std::vector<FieldSpec> fields;
  // Where the images are decoded (a job with images only): kEncoded batches carry the
  // image members as stored with the transform's parameters for each (same samples,
  // same crops), for the trainer to decode.
  ImageDelivery delivery = ImageDelivery::kServer;
};

// The built-in job defaults, the seed's: batch 32, split shard, remainder drop, one
// worker, no shuffles, Resize(256) + CenterCrop(224). A server started without job
// flags serves these for what a registration leaves unset.
inline JobConfig DefaultJobConfig() {
  JobConfig config;
  config.plan.batch_size = 32;
  return config;
}

// A job config with holes: what a trainer asks for (unset = the server's default),
// and what server flags change in the built-in defaults. Mapped to and from the
// wire's RegisterRequest by proto/job_config_proto.h.
struct JobOverrides {
  std::optional<int32_t> batch_size;
  std::optional<Split> split;
  std::optional<Remainder> remainder;
  std::optional<int32_t> workers;
  std::optional<uint64_t> seed;
  std::optional<bool> shuffle_shards;
  std::optional<int32_t> shuffle_buffer;
  std::optional<int32_t> block_size;
  std::optional<TransformMode> transform_mode;
  std::optional<int32_t> resize;
  std::optional<int32_t> crop;
  std::optional<bool> image;
  std::optional<std::vector<FieldSpec>> fields;
  std::optional<ImageDelivery> delivery;
};

// `base` with every set field of `overrides` replacing its value. world_size is
// not a job default: it comes with each registration.
JobConfig ApplyOverrides(const JobOverrides& overrides, JobConfig base);

// Limits. Every one is checked by Validate; nothing else re-states them.
inline constexpr int32_t kMaxWorldSize = 1 << 16;
inline constexpr int32_t kMaxBatchSize = 1 << 16;
inline constexpr int32_t kMaxWorkers = 1024;
inline constexpr int32_t kMaxShuffleBuffer = 1 << 24;
inline constexpr int kMaxCrop = 8192;
inline constexpr int kMaxResize = 16384;
inline constexpr size_t kMaxJobIdLength = 256;

// What depends on how a server runs rather than on the job.
struct JobLimits {
  // Largest Batch message the server sends (its --max-message-size).
  int64_t max_message_bytes = int64_t{512} << 20;
};

// Bytes of one Batch message of this config: pixels (none for a members-only job or
// one with encoded delivery) plus a generous per-sample and per-message allowance for
// labels, keys and flags. Member bytes (encoded images included) are not in it: they
// depend on the samples (the server bounds them by --max-member-bytes and counts each
// batch's in its batch memory).
int64_t BatchMessageBytes(const JobConfig& config);

// Every limit above, the transform's consistency (center: resize >= crop), the
// fields (a members-only job asks for at least one) and the message size. INVALID_ARGUMENT naming
// the field (as the wire spells it), the value, the limit and what to change. Whether the data can
// serve the job is the planner's check (BatchesPerRank), not this one.
absl::Status Validate(const JobConfig& config, const JobLimits& limits = {});

// Server settings outside the job config that change the bytes of a batch: which
// images the server substitutes (a grey image) instead of decoding, and the
// benchmark mode that resends one batch. Two replicas run with other values serve
// other bytes for the same job, so they are in the job fingerprint. The server
// normalizes each to what it does to the data it serves (ServeSettingsFor in
// server/serving/job_registry.h): a limit that nothing in the data can reach is 0, so
// replicas whose limits differ only where the data never goes still agree.
struct ServeSettings {
  // Image members larger than this are substituted unread (--max-member-bytes);
  // 0 = none is (the limit is above the data's largest image member).
  int64_t max_member_bytes = 0;
  // An image whose decode buffers alone need more than this is substituted
  // (--max-decode-memory); 0 = none is (the limit is above what any image the
  // decoder accepts can need).
  int64_t max_decode_bytes = 0;
  // The decoder's pixel limit: larger images are substituted (a build constant).
  int64_t max_pixels = 0;
  // BENCHMARK ONLY (--bench-only-resend-first-batch): every batch of a stream carries
  // the bytes of its first.
  bool resend_first_batch = false;
};

// Bump when the server's rules for which images it substitutes, or what it sends in
// their place, change: the job fingerprint then changes, as for kTransformVersion.
// 2: WebP content is decoded (libwebp), where it was substituted, also under a .jpg or
// .png name: a replica of the older version would serve other bytes for the same job.
inline constexpr int kSubstitutionVersion = 2;

// One line: "max_member_bytes=0 max_decode_bytes=0 max_pixels=178956970
// resend_first_batch=false" (0 = no limit that the data reaches).
std::string ServeSettingsString(const ServeSettings& serve);

// The first setting in which two configs differ, as (field, a, b) text, e.g.
// {"transform.crop", "224", "160"}; nullopt when they are equal. Field names are
// the wire's.
struct ConfigDifference {
  std::string field;
  std::string a;
  std::string b;
};
std::optional<ConfigDifference> FirstDifference(const JobConfig& a, const JobConfig& b);

// One line: "world_size=2 batch_size=32 split=shard ... transform=center resize=256 crop=224".
std::string JobConfigString(const JobConfig& config);

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_PLAN_JOB_CONFIG_H_
