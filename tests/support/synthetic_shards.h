// Small synthetic WebDataset shard directories for tests, benchmarks and fuzz harnesses,
// written with the pack library. No gtest dependency and no build-tree paths, so
// anything that links shardcast_pack can use it.
#ifndef SHARDCAST_TESTS_SUPPORT_SYNTHETIC_SHARDS_H_
#define SHARDCAST_TESTS_SUPPORT_SYNTHETIC_SHARDS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/pack/synthetic_dataset.h"

namespace shardcast::testing_util {

// Writes a learnable synthetic dataset (JPEG + json + cls, seed 7) to `dir`.
inline absl::Status MakeSyntheticShards(const std::string& dir, int64_t num_samples,
                                        int num_classes, int size, int64_t per_shard) {
  pack::SyntheticOptions options;
  options.num_samples = num_samples;
  options.num_classes = num_classes;
  options.width = size;
  options.height = size;
  options.per_shard = per_shard;
  options.seed = 7;
  options.threads = 2;
  absl::StatusOr<pack::PackSummary> summary = pack::WriteSyntheticDataset(dir, options);
  return summary.status();
}

}  // namespace shardcast::testing_util

#endif  // SHARDCAST_TESTS_SUPPORT_SYNTHETIC_SHARDS_H_
