// `shardcast-ctl plan`: prints an epoch's plan, one line per batch, for a shard
// directory (through the dataset index) or for a list of shard sizes.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/ctl/command_registry.h"
#include "common/flags/flags.h"
#include "common/flags/job_flags.h"
#include "common/plan/epoch_plan.h"
#include "common/plan/field_spec.h"
#include "common/plan/job_config.h"
#include "common/plan/job_samples.h"
#include "common/plan/mixture_epoch.h"
#include "common/plan/mixture_text.h"
#include "common/shards/dataset_index.h"

namespace shardcast::ctl {
namespace {

constexpr char kUsage[] =
    "usage: shardcast-ctl plan (--shards DIR | --sizes N,N,...) --world-size W --batch-size B\n"
    "         [--workers K] [--split shard|sample] [--remainder drop|pad] [--seed S]\n"
    "         [--shuffle-shards] [--shuffle-buffer N] [--block-size N] [--epoch E] [--rank R]\n"
    "         [--fields LIST [--no-image] [--max-member-bytes SIZE]]\n"
    "       shardcast-ctl plan --mix NAME=W,... --dataset NAME=DIR ... --world-size W\n"
    "         --batch-size B [--samples-per-epoch N] [--remainder drop|pad] [--seed S]\n"
    "         [--epoch E] [--rank R] [--batches K] [--fields LIST ...]\n"
    "\n"
    "Prints one line per batch: EPOCH RANK BATCH SHARD:INDEX,SHARD:INDEX,... (SHARD = position\n"
    "in the sorted shard list, INDEX = sample position in its shard; padding is -1:-1),\n"
    "ranks in order (or only --rank R), batches in order. n and the plan fingerprint go to\n"
    "stderr. --sizes plans for shards of the given sample counts, without data. --fields plans\n"
    "what a job asking for those fields is served (with --shards): the samples without a\n"
    "required field, or with a member over --max-member-bytes, are left out as the server\n"
    "leaves them out (counted on stderr); INDEX is still the sample's position in its shard.\n"
    "--mix plans a mixture of the --dataset directories as the server deals it (split sample;\n"
    "a schedule as STEP:NAME=W,...;STEP:..., or a FILE.json as shardcast-train's --mix): each\n"
    "sample is NAME/SHARD:INDEX, and stderr says each dataset's share of the lines printed.\n"
    "--batches K prints each rank's first K.\n";

struct PlanFlags {
  std::string shards_dir;
  std::optional<std::vector<uint32_t>> sizes;
  PlanConfig config;
  int64_t epoch = 0;
  std::optional<int32_t> rank;
  std::optional<JobConfig> job;  // --fields / --no-image: plan that job's samples
  std::string mix;               // --mix: a mixture (mixture_text.h)
  std::vector<std::pair<std::string, std::string>> datasets;  // --dataset NAME=DIR
  int64_t samples_per_epoch = 0;                 // --samples-per-epoch (0: the default)
  int64_t batches = -1;                          // --batches: per rank (-1: all)
  int64_t max_member_bytes = int64_t{64} << 20;  // the server's default
  bool help = false;
  std::string help_text;
};

absl::StatusOr<PlanFlags> ParseFlags(const std::vector<std::string>& args) {
  PlanFlags flags;
  PlanConfig& config = flags.config;
  FlagSet parser("shardcast-ctl plan");
  parser.String({{"--shards"}, "DIR", "shard directory"}, &flags.shards_dir);
  parser.Add({{"--sizes"}, "N,N,...", "shard sample counts (instead of --shards)"}, 1,
             [&flags](const std::string& flag, const std::vector<std::string>& values) {
               std::vector<uint32_t> sizes;
               for (absl::string_view part : absl::StrSplit(values[0], ',')) {
                 uint32_t size = 0;
                 if (!absl::SimpleAtoi(part, &size)) {
                   return absl::InvalidArgumentError(
                       absl::StrCat(flag, " takes integers >= 0, got '", part, "'"));
                 }
                 sizes.push_back(size);
               }
               flags.sizes = std::move(sizes);
               return absl::OkStatus();
             });
  // The plan's settings under the names the server's and the trainer's flags give
  // them (common/flags/job_flags.h); a plan needs no transform.
  std::optional<int32_t> world_size;
  std::optional<int32_t> batch_size;
  parser.OptionalInt({{"--world-size"}, "W", "number of ranks (required)"}, &world_size, 1,
                     kMaxWorldSize);
  parser.OptionalInt({{"--batch-size"}, "B", "per-rank batch size (required)"}, &batch_size, 1,
                     kMaxBatchSize);
  parser.Int({{"--workers"}, "K", "virtual DataLoader workers per rank (split shard)"},
             &config.workers, 1, kMaxWorkers);
  parser.Add({{"--split"},
              absl::StrJoin(SplitNames(), "|"),
              "how samples are dealt to ranks",
              SplitName(config.split)},
             1, EnumFlag(&ParseSplit, &config.split));
  parser.Add({{"--remainder"},
              absl::StrJoin(RemainderNames(), "|"),
              "what happens to the tail",
              RemainderName(config.remainder)},
             1, EnumFlag(&ParseRemainder, &config.remainder));
  parser.Uint64({{"--seed"}, "S", "seed of the shuffles"}, &config.seed);
  parser.Bool({{"--shuffle-shards"}, "", "shuffle the shard order every epoch"},
              &config.shuffle_shards);
  parser.Int({{"--shuffle-buffer"}, "N", "per-worker sample shuffle buffer (split shard)"},
             &config.shuffle_buffer, 0, kMaxShuffleBuffer);
  parser.Int({{"--block-size"},
              "N",
              "shards per shuffle block (split sample); 0 = one global permutation"},
             &config.block_size, 0);
  parser.Int64({{"--epoch"}, "E", "the epoch to plan"}, &flags.epoch, 0);
  parser.OptionalInt({{"--rank"}, "R", "only this rank (default: every rank)"}, &flags.rank, 0,
                     kMaxWorldSize - 1);
  parser.String({{"--mix"}, "NAME=W,...|FILE.json", "plan a mixture of the --dataset directories"},
                &flags.mix);
  parser.Add({{"--dataset"},
              "NAME=DIR",
              "a dataset of the mixture (repeat for each)",
              "",
              /*repeatable=*/true},
             1, [&flags](const std::string& flag, const std::vector<std::string>& values) {
               const size_t eq = values[0].find('=');
               if (eq == std::string::npos || eq == 0) {
                 return absl::InvalidArgumentError(absl::StrCat(flag, " takes NAME=DIR"));
               }
               flags.datasets.emplace_back(values[0].substr(0, eq), values[0].substr(eq + 1));
               return absl::OkStatus();
             });
  parser.Int64({{"--samples-per-epoch"}, "N", "with --mix: the epoch's length in samples"},
               &flags.samples_per_epoch, 0);
  parser.Int64({{"--batches"}, "K", "print each rank's first K batches (default: all)"},
               &flags.batches, -1);
  JobOverrides job_flags;
  AddFieldFlags(&parser, JobConfig(), &job_flags);
  parser.Size({{"--max-member-bytes"}, "SIZE", "as the server's flag, for --fields"},
              &flags.max_member_bytes);
  if (absl::Status s = parser.Parse(args); !s.ok()) return s;
  flags.help = parser.help_requested();
  if (flags.help) {
    flags.help_text = parser.Help();
    return flags;
  }
  if (!flags.mix.empty()) {
    if (flags.datasets.empty() || !flags.shards_dir.empty() || flags.sizes) {
      return absl::InvalidArgumentError(
          "--mix plans the --dataset NAME=DIR directories it names (not --shards or --sizes)");
    }
    config.split = Split::kSample;  // a mixture is dealt as split sample
  } else if (flags.shards_dir.empty() == !flags.sizes.has_value()) {
    return absl::InvalidArgumentError("give exactly one of --shards DIR or --sizes N,N,...");
  }
  if (!world_size || !batch_size) {
    return absl::InvalidArgumentError("--world-size and --batch-size are required");
  }
  absl::StatusOr<std::optional<JobConfig>> job = FieldJobFromFlags(job_flags);
  if (!job.ok()) return job.status();
  flags.job = *std::move(job);
  if (flags.job && flags.sizes && flags.mix.empty()) {
    return absl::InvalidArgumentError("--fields selects samples by their members: give --shards");
  }
  config.world_size = *world_size;
  config.batch_size = *batch_size;
  if (flags.rank && *flags.rank >= config.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rank ", *flags.rank, " is out of range for --world-size ", config.world_size));
  }
  return flags;
}

// --mix: the mixture of the --dataset directories, planned as the server plans it.
int RunMixturePlan(const PlanFlags& flags) {
  absl::StatusOr<std::vector<MixturePoint>> points = ParseMixtureFlag(flags.mix);
  if (!points.ok()) {
    std::fprintf(stderr, "shardcast-ctl plan: %s\n", points.status().ToString().c_str());
    return 2;
  }
  MixtureSpec spec;
  spec.schedule = *std::move(points);
  spec.seed = flags.config.seed;
  // The mixture's order is by name, as the server's.
  std::vector<std::pair<std::string, std::string>> datasets = flags.datasets;
  std::sort(datasets.begin(), datasets.end());
  std::vector<std::shared_ptr<const JobSamples>> selections;
  std::vector<std::vector<uint32_t>> sizes;
  uint64_t total = 0;
  for (const auto& [name, dir] : datasets) {
    absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(dir, IndexOptions{});
    if (!index.ok()) {
      std::fprintf(stderr, "shardcast-ctl plan: dataset '%s': %s\n", name.c_str(),
                   index.status().ToString().c_str());
      return 1;
    }
    absl::StatusOr<std::shared_ptr<const JobSamples>> selected =
        JobSamples::Select(*index, flags.job.value_or(JobConfig()), flags.max_member_bytes);
    if (!selected.ok()) {
      std::fprintf(stderr, "shardcast-ctl plan: refused: dataset '%s': %s\n", name.c_str(),
                   std::string(selected.status().message()).c_str());
      return 1;
    }
    spec.datasets.push_back(
        MixtureDataset{name, static_cast<uint64_t>((*selected)->num_samples())});
    total += static_cast<uint64_t>((*selected)->num_samples());
    sizes.push_back((*selected)->shard_sizes());
    selections.push_back(*std::move(selected));
  }
  spec.samples_per_epoch =
      flags.samples_per_epoch > 0 ? static_cast<uint64_t>(flags.samples_per_epoch) : total;
  absl::StatusOr<std::shared_ptr<const MixtureJobPlan>> job =
      MixtureJobPlan::Create(spec, std::move(sizes), flags.config);
  absl::StatusOr<std::shared_ptr<const EpochPlan>> plan =
      job.ok() ? (*job)->Epoch(flags.epoch) : job.status();
  if (!plan.ok()) {
    std::fprintf(stderr, "shardcast-ctl plan: refused: %s\n", plan.status().ToString().c_str());
    return 1;
  }
  std::fprintf(
      stderr, "# mixture %s, %llu samples per epoch, %s, epoch %lld: %lld batches per rank\n",
      MixtureText(spec.schedule).c_str(), static_cast<unsigned long long>(spec.samples_per_epoch),
      PlanConfigString(flags.config).c_str(), static_cast<long long>(flags.epoch),
      static_cast<long long>((*plan)->batches_per_rank()));
  const int32_t first = flags.rank.value_or(0);
  const int32_t last = flags.rank ? *flags.rank : flags.config.world_size - 1;
  std::vector<int64_t> shown(datasets.size(), 0);
  int64_t valid = 0;
  std::string line;
  PlannedBatch batch;
  for (int32_t rank = first; rank <= last; ++rank) {
    std::unique_ptr<RankBatchIterator> it =
        MapMixtureToIndex(selections, (*plan)->Iterate(rank, 0));
    for (int64_t b = 0; (flags.batches < 0 || b < flags.batches) && it->Next(&batch); ++b) {
      line.clear();
      absl::StrAppend(&line, batch.epoch, " ", batch.rank, " ", batch.index, " ");
      for (size_t i = 0; i < batch.samples.size(); ++i) {
        const SampleRef& ref = batch.samples[i];
        if (i > 0) line.push_back(',');
        if (!ref.valid()) {
          line += "-:-1:-1";
          continue;
        }
        absl::StrAppend(&line, datasets[static_cast<size_t>(ref.dataset)].first, "/", ref.shard,
                        ":", ref.index);
        ++shown[static_cast<size_t>(ref.dataset)];
        ++valid;
      }
      line.push_back('\n');
      if (std::fwrite(line.data(), 1, line.size(), stdout) != line.size()) return 1;
    }
  }
  for (size_t d = 0; d < datasets.size(); ++d) {
    std::fprintf(stderr, "#   %s: %lld of %lld samples printed (%.4f)\n", datasets[d].first.c_str(),
                 static_cast<long long>(shown[d]), static_cast<long long>(valid),
                 valid > 0 ? static_cast<double>(shown[d]) / static_cast<double>(valid) : 0.0);
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

int RunPlan(const std::vector<std::string>& args) {
  absl::StatusOr<PlanFlags> flags = ParseFlags(args);
  if (!flags.ok()) {
    std::fprintf(stderr, "shardcast-ctl plan: %s\n\n%s", flags.status().ToString().c_str(), kUsage);
    return 2;
  }
  if (flags->help) {
    std::printf("%s\nflags:\n%s", kUsage, flags->help_text.c_str());
    return 0;
  }
  if (!flags->mix.empty()) return RunMixturePlan(*flags);
  std::vector<uint32_t> sizes;
  std::string index_fingerprint = "sizes";
  std::shared_ptr<const JobSamples> selection;  // with --fields
  if (flags->sizes) {
    sizes = *flags->sizes;
    for (uint32_t size : sizes) absl::StrAppend(&index_fingerprint, ",", size);
  } else {
    absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(flags->shards_dir, IndexOptions{});
    if (!index.ok()) {
      std::fprintf(stderr, "shardcast-ctl plan: %s\n", index.status().ToString().c_str());
      return 1;
    }
    sizes = index->ShardSampleCounts();
    index_fingerprint = index->fingerprint;
    if (flags->job) {
      absl::StatusOr<std::shared_ptr<const JobSamples>> selected =
          JobSamples::Select(*index, *flags->job, flags->max_member_bytes);
      if (!selected.ok()) {
        std::fprintf(stderr, "shardcast-ctl plan: refused: %s\n",
                     std::string(selected.status().message()).c_str());
        return 1;
      }
      selection = *std::move(selected);
      sizes = selection->shard_sizes();
      std::fprintf(stderr, "# fields %s: %lld of %lld samples\n",
                   FieldSpecsString(flags->job->fields).c_str(),
                   static_cast<long long>(selection->num_samples()),
                   static_cast<long long>(index->num_samples));
      for (const LeftOut& out : selection->left_out()) {
        std::fprintf(stderr, "#   left out %lld: %s\n", static_cast<long long>(out.count),
                     out.reason.c_str());
      }
    }
  }
  const PlanConfig& config = flags->config;
  absl::StatusOr<std::shared_ptr<const EpochPlan>> plan =
      EpochPlan::Create(sizes, config, flags->epoch);
  if (!plan.ok()) {
    std::fprintf(stderr, "shardcast-ctl plan: refused: %s\n", plan.status().ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "# %zu shards, %s, epoch %lld: %lld batches per rank, fingerprint %s\n",
               sizes.size(), PlanConfigString(config).c_str(), static_cast<long long>(flags->epoch),
               static_cast<long long>((*plan)->batches_per_rank()),
               PlanFingerprint(index_fingerprint, config).c_str());
  const int32_t first = flags->rank.value_or(0);
  const int32_t last = flags->rank ? *flags->rank : config.world_size - 1;
  std::string line;
  PlannedBatch batch;
  for (int32_t rank = first; rank <= last; ++rank) {
    std::unique_ptr<RankBatchIterator> it = (*plan)->Iterate(rank, 0);
    if (selection != nullptr) it = selection->MapToIndex(std::move(it));
    while (it->Next(&batch)) {
      line.clear();
      absl::StrAppend(&line, batch.epoch, " ", batch.rank, " ", batch.index, " ");
      for (size_t i = 0; i < batch.samples.size(); ++i) {
        if (i > 0) line.push_back(',');
        absl::StrAppend(&line, batch.samples[i].shard, ":", batch.samples[i].index);
      }
      line.push_back('\n');
      if (std::fwrite(line.data(), 1, line.size(), stdout) != line.size()) return 1;
    }
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

static RegisterCommand reg("plan", {"print an epoch's batch plan (per rank, per batch)", RunPlan});

}  // namespace
}  // namespace shardcast::ctl
