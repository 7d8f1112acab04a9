// `shardcast-ctl plan`: prints an epoch's plan, one line per batch, for a shard
// directory (through the dataset index) or for a list of shard sizes.
#include <algorithm>
#include <cstdio>
#include <iterator>
#include <limits>
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

template <typename Int>
absl::Status ParseInt(const std::string& flag, const std::string& text, Int min, Int* out) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < static_cast<int64_t>(min) ||
      value > static_cast<int64_t>(std::numeric_limits<Int>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " needs an integer >= ", min, ", got '", text, "'"));
  }
  *out = static_cast<Int>(value);
  return absl::OkStatus();
}

absl::StatusOr<PlanFlags> ParseFlags(const std::vector<std::string>& args) {
  PlanFlags flags;
  bool have_world = false, have_batch = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i], value;
    bool inline_value = false;
    if (const size_t eq = name.find('='); name.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    if (name == "--help" || name == "-h") {
      flags.help = true;
      continue;
    }
    if (name == "--shuffle-shards") {
      if (inline_value) return absl::InvalidArgumentError("--shuffle-shards takes no value");
      flags.config.shuffle_shards = true;
      continue;
    }
    static const char* const kValued[] = {
        "--shards", "--sizes", "--world", "--batch",          "--workers",    "--split",
        "--seed",   "--epoch", "--rank",  "--shuffle-buffer", "--block-size", "--remainder"};
    if (std::find(std::begin(kValued), std::end(kValued), name) == std::end(kValued)) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '", args[i], "'"));
    }
    if (!inline_value) {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError(name + " needs a value");
      value = args[++i];
    }
    absl::Status s;
    if (name == "--shards") {
      flags.shards_dir = value;
    } else if (name == "--sizes") {
      std::vector<uint32_t> sizes;
      for (absl::string_view part : absl::StrSplit(value, ',')) {
        uint32_t size = 0;
        s = ParseInt("--sizes", std::string(part), uint32_t{0}, &size);
        if (!s.ok()) break;
        sizes.push_back(size);
      }
      flags.sizes = std::move(sizes);
    } else if (name == "--world") {
      s = ParseInt(name, value, int32_t{1}, &flags.config.world_size);
      have_world = true;
    } else if (name == "--batch") {
      s = ParseInt(name, value, int32_t{1}, &flags.config.batch_size);
      have_batch = true;
    } else if (name == "--workers") {
      s = ParseInt(name, value, int32_t{1}, &flags.config.workers);
    } else if (name == "--seed") {
      if (!absl::SimpleAtoi(value, &flags.config.seed)) {
        s = absl::InvalidArgumentError(
            absl::StrCat("--seed needs an unsigned 64-bit integer, got '", value, "'"));
      }
    } else if (name == "--epoch") {
      s = ParseInt(name, value, int64_t{0}, &flags.epoch);
    } else if (name == "--rank") {
      int32_t rank = 0;
      s = ParseInt(name, value, int32_t{0}, &rank);
      flags.rank = rank;
    } else if (name == "--shuffle-buffer") {
      s = ParseInt(name, value, int32_t{0}, &flags.config.shuffle_buffer);
    } else if (name == "--block-size") {
      s = ParseInt(name, value, int32_t{0}, &flags.config.block_size);
    } else if (name == "--split") {
      absl::StatusOr<Split> split = ParseSplit(value);
      if (split.ok()) flags.config.split = *split;
      s = split.status();
    } else if (name == "--remainder") {
      absl::StatusOr<Remainder> remainder = ParseRemainder(value);
      if (remainder.ok()) flags.config.remainder = *remainder;
      s = remainder.status();
    }
    if (!s.ok()) return s;
  }
  if (flags.help) return flags;
  if (flags.shards_dir.empty() == !flags.sizes.has_value()) {
    return absl::InvalidArgumentError("give exactly one of --shards DIR or --sizes N,N,...");
  }
  if (!have_world || !have_batch) {
    return absl::InvalidArgumentError("--world and --batch are required");
  }
  if (flags.rank && *flags.rank >= flags.config.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rank ", *flags.rank, " is out of range for --world ", flags.config.world_size));
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
