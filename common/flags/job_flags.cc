// The job's flags (see job_flags.h).
#include "common/flags/job_flags.h"

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardcast {
void AddJobFlags(FlagSet* flags, const JobConfig& defaults, JobOverrides* o) {
  const PlanConfig& p = defaults.plan;
  const TransformSpec& t = defaults.transform;
  flags->OptionalInt({{"--batch-size", "-b", "--batch_size"},
                      "B",
                      "per-rank batch size",
                      absl::StrCat(p.batch_size)},
                     &o->batch_size, 1, kMaxBatchSize);
  flags->Add({{"--split"},
              absl::StrJoin(SplitNames(), "|"),
              "shard: whole shards per rank, webdataset's split_by_node with repeat/slice\n"
              "(the seed's); sample: an exactly-once per-epoch permutation",
              SplitName(p.split)},
             1, EnumFlag(&ParseSplit, &o->split));
  flags->Add({{"--remainder"},
              absl::StrJoin(RemainderNames(), "|"),
              "drop: n = N // (B*W); pad: n = ceil(N / (B*W)), padding flagged invalid\n"
              "(split sample)",
              RemainderName(p.remainder)},
             1, EnumFlag(&ParseRemainder, &o->remainder));
  flags->OptionalInt({{"--workers", "-w", "--num_workers"},
                      "K",
                      "virtual DataLoader workers per rank (split shard)",
                      absl::StrCat(p.workers)},
                     &o->workers, 1, kMaxWorkers);
  flags->OptionalUint64(
      {{"--seed"}, "S", "seed of shuffles and random transforms", absl::StrCat(p.seed)}, &o->seed);
  flags->Add({{"--shuffle"},
              "[N]",
              "the seed's flag: shuffle the shard order every epoch and use a shuffle buffer\n"
              "of N samples (bare: keep the buffer setting; negative: no shuffle at all)",
              ""},
             FlagSet::kOptionalValue,
             [o](const std::string& flag, const std::vector<std::string>& values) {
               if (values.empty()) {
                 o->shuffle_shards = true;
                 return absl::OkStatus();
               }
               int64_t n = 0;
               if (!absl::SimpleAtoi(values[0], &n) || n > kMaxShuffleBuffer) {
                 return absl::InvalidArgumentError(absl::StrCat(
                     flag, " takes an integer <= ", kMaxShuffleBuffer, ", got '", values[0], "'"));
               }
               o->shuffle_shards = n >= 0;
               if (n != 0) o->shuffle_buffer = static_cast<int32_t>(n < 0 ? 0 : n);
               return absl::OkStatus();
             });
  flags->OptionalBool({{"--shuffle-shards"},
                       "",
                       "shuffle the shard order every epoch",
                       p.shuffle_shards ? "true" : "false"},
                      &o->shuffle_shards);
  flags->OptionalInt({{"--shuffle-buffer"},
                      "N",
                      "per-worker sample shuffle buffer (split shard)",
                      absl::StrCat(p.shuffle_buffer)},
                     &o->shuffle_buffer, 0, kMaxShuffleBuffer);
  flags->OptionalInt({{"--block-size"},
                      "N",
                      "shards per shuffle block (split sample); 0 = one global permutation",
                      absl::StrCat(p.block_size)},
                     &o->block_size, 0, std::numeric_limits<int32_t>::max());
  flags->Add({{"--transform"},
              absl::StrJoin(TransformModeNames(), "|"),
              "center: Resize(resize) + CenterCrop(crop); random: RandomResizedCrop(crop) +\n"
              "horizontal flip",
              TransformModeName(t.mode)},
             1, EnumFlag(&ParseTransformMode, &o->transform_mode));
  flags->OptionalInt(
      {{"--resize"}, "N", "short side of the center transform", absl::StrCat(t.resize)}, &o->resize,
      1, kMaxResize);
  flags->OptionalInt(
      {{"--crop"}, "N", "output size: images are 3 x N x N uint8", absl::StrCat(t.crop)}, &o->crop,
      1, kMaxCrop);
  AddFieldFlags(flags, defaults, o);
}

void AddFieldFlags(FlagSet* flags, const JobConfig& defaults, JobOverrides* o) {
  flags->Add(
      {{"--fields"},
       "LIST",
       "sample members each batch carries beside the image, as stored in the tar,\n"
       "by extension: txt,json?,jpg;png (';': alternatives, '?': may be missing;\n"
       "a sample without a required one is left out of the plan)",
       FieldSpecsString(defaults.fields)},
      1, [o](const std::string& flag, const std::vector<std::string>& values) {
        absl::StatusOr<std::vector<FieldSpec>> fields = ParseFieldSpecList(values[0]);
        if (!fields.ok()) {
          return absl::InvalidArgumentError(absl::StrCat(flag, ": ", fields.status().message()));
        }
        o->fields = *std::move(fields);
        return absl::OkStatus();
      });
  flags->Add({{"--no-image"},
              "",
              "batches carry no image, only the --fields members: nothing is decoded\n"
              "(text, audio or token shards)"},
             0, [o](const std::string& flag, const std::vector<std::string>& values) {
               if (!values.empty()) return absl::InvalidArgumentError(flag + " takes no value");
               o->image = false;
               return absl::OkStatus();
             });
}

absl::StatusOr<std::optional<JobConfig>> FieldJobFromFlags(const JobOverrides& overrides) {
  if (!overrides.fields && !overrides.image) return std::optional<JobConfig>();
  JobConfig job;
  job.image = overrides.image.value_or(true);
  job.fields = overrides.fields.value_or(std::vector<FieldSpec>());
  if (!job.image && job.fields.empty()) {
    return absl::InvalidArgumentError("--no-image needs --fields (a job asks for something)");
  }
  return std::optional<JobConfig>(std::move(job));
}

}  // namespace shardcast
