// Output-dir handling, dataset finishing and the portable shuffle shared by
// the synthetic and ImageFolder pack modes.
#include "tools/pack/pack_pipeline.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace shardcast::pack {

namespace fs = std::filesystem;

std::vector<int64_t> SeededPermutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> perm(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) perm[static_cast<size_t>(i)] = i;
  SplitMix64 rng(seed ^ 0x5eed5eed5eed5eedULL);
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i) + 1));
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
  }
  return perm;
}

int ResolveThreads(int requested) {
  if (requested > 0) return requested;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

absl::Status CheckShardLimits(int64_t per_shard, int64_t max_shard_bytes) {
  if (per_shard < 0) {
    return absl::InvalidArgumentError(absl::StrCat("per_shard must be >= 0, got ", per_shard));
  }
  if (max_shard_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_shard_bytes must be >= 0, got ", max_shard_bytes));
  }
  return absl::OkStatus();
}

absl::Status PrepareOutputDir(const std::string& out_dir) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec || !fs::is_directory(out_dir)) {
    return absl::UnavailableError(absl::StrCat("cannot create output directory ", out_dir, ": ",
                                               ec ? ec.message() : "not a directory"));
  }
  // Collect first: removing entries while iterating is unspecified.
  std::vector<fs::path> stale;
  for (const fs::directory_entry& e : fs::directory_iterator(out_dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool ours = name == "info.json" || name == "info.json.tmp" ||
                      (absl::StartsWith(name, "shard-") &&
                       (absl::EndsWith(name, ".tar") || absl::EndsWith(name, ".tar.tmp")));
    if (ours && e.is_regular_file()) stale.push_back(e.path());
  }
  if (ec) {
    return absl::UnavailableError(absl::StrCat("cannot list ", out_dir, ": ", ec.message()));
  }
  for (const fs::path& p : stale) {
    fs::remove(p, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("cannot remove old ", p.string(), ": ", ec.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status FinishDataset(const std::string& out_dir, ShardWriter& writer, int num_classes,
                           const std::vector<std::string>& class_names, PackSummary& summary) {
  if (absl::Status s = writer.Close(); !s.ok()) return s;
  summary.samples = writer.samples();
  summary.num_classes = num_classes;
  summary.shards = writer.shard_paths();
  summary.shard_samples = writer.shard_samples();
  summary.bytes = writer.bytes();
  DatasetInfo info;
  info.dataset_size = writer.samples();
  info.num_classes = num_classes;
  info.class_names = class_names;
  for (const std::string& p : writer.shard_paths()) {
    info.shards.push_back(fs::path(p).filename().string());
  }
  info.shard_samples = writer.shard_samples();
  return WriteDatasetInfo(out_dir, info);
}

}  // namespace shardcast::pack
