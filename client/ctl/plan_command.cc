// `shardcast-ctl plan`: prints an epoch's plan, one line per batch, for a shard
// directory (through the dataset index) or for a list of shard sizes.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/ctl/command_registry.h"
#include "client/ctl/flag_parser.h"
#include "common/dataset_index.h"
#include "common/epoch_plan.h"

namespace shardcast::ctl {
namespace {

constexpr char kUsage[] =
    "usage: shardcast-ctl plan (--shards DIR | --sizes N,N,...) --world W --batch B\n"
    "         [--workers K] [--split shard|sample] [--remainder drop|pad] [--seed S]\n"
    "         [--shuffle-shards] [--shuffle-buffer N] [--block-size N] [--epoch E] [--rank R]\n"
    "\n"
    "Prints one line per batch: EPOCH RANK BATCH SHARD:INDEX,SHARD:INDEX,... (SHARD = position\n"
    "in the sorted shard list, INDEX = sample position in its shard; padding is -1:-1),\n"
    "ranks in order (or only --rank R), batches in order. n and the plan fingerprint go to\n"
    "stderr. --sizes plans for shards of the given sample counts, without data.\n";

struct PlanFlags {
  std::string shards_dir;
  std::optional<std::vector<uint32_t>> sizes;
  PlanConfig config;
  int64_t epoch = 0;
  std::optional<int32_t> rank;
  bool help = false;
};

absl::StatusOr<PlanFlags> ParseFlags(const std::vector<std::string>& args) {
  PlanFlags flags;
  PlanConfig& config = flags.config;
  config.world_size = 0;  // required: 0 = not given
  config.batch_size = 0;
  int32_t rank = -1;
  FlagParser parser;
  parser.AddString("shards", "DIR", &flags.shards_dir, "shard directory");
  parser.AddCustom("sizes", "N,N,...", "shard sample counts", [&flags](const std::string& text) {
    std::vector<uint32_t> sizes;
    for (absl::string_view part : absl::StrSplit(text, ',')) {
      uint32_t size = 0;
      if (!absl::SimpleAtoi(part, &size)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--sizes needs integers >= 0, got '", part, "'"));
      }
      sizes.push_back(size);
    }
    flags.sizes = std::move(sizes);
    return absl::OkStatus();
  });
  parser.AddInt("world", "W", &config.world_size, int32_t{1}, "world size");
  parser.AddInt("batch", "B", &config.batch_size, int32_t{1}, "batch size");
  parser.AddInt("workers", "K", &config.workers, int32_t{1}, "virtual workers per rank");
  parser.AddCustom("split", "shard|sample", "split", [&config](const std::string& text) {
    absl::StatusOr<Split> split = ParseSplit(text);
    if (split.ok()) config.split = *split;
    return split.status();
  });
  parser.AddCustom("remainder", "drop|pad", "remainder", [&config](const std::string& text) {
    absl::StatusOr<Remainder> remainder = ParseRemainder(text);
    if (remainder.ok()) config.remainder = *remainder;
    return remainder.status();
  });
  parser.AddInt("seed", "S", &config.seed, uint64_t{0}, "seed");
  parser.AddBool("shuffle-shards", &config.shuffle_shards, "shuffle the shard order");
  parser.AddInt("shuffle-buffer", "N", &config.shuffle_buffer, int32_t{0}, "shuffle buffer");
  parser.AddInt("block-size", "N", &config.block_size, int32_t{0}, "shards per block");
  parser.AddInt("epoch", "E", &flags.epoch, int64_t{0}, "epoch");
  parser.AddInt("rank", "R", &rank, int32_t{0}, "only this rank");
  if (absl::Status s = parser.Parse(args); !s.ok()) return s;
  flags.help = parser.help_requested();
  if (flags.help) return flags;
  if (rank >= 0) flags.rank = rank;
  if (flags.shards_dir.empty() == !flags.sizes.has_value()) {
    return absl::InvalidArgumentError("give exactly one of --shards DIR or --sizes N,N,...");
  }
  if (config.world_size == 0 || config.batch_size == 0) {
    return absl::InvalidArgumentError("--world and --batch are required");
  }
  if (flags.rank && *flags.rank >= config.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rank ", *flags.rank, " is out of range for --world ", config.world_size));
  }
  return flags;
}

int RunPlan(const std::vector<std::string>& args) {
  absl::StatusOr<PlanFlags> flags = ParseFlags(args);
  if (!flags.ok()) {
    std::fprintf(stderr, "shardcast-ctl plan: %s\n\n%s", flags.status().ToString().c_str(), kUsage);
    return 2;
  }
  if (flags->help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::vector<uint32_t> sizes;
  std::string index_fingerprint = "sizes";
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
