// Which samples of a shard a job selects (job_samples.h), as a bitmap with a running
// count every 512 samples: the k-th selected sample's position in a binary search over
// the counts and at most 8 words' popcounts. 0.19 bytes per sample of the shard, where
// a list of the positions took 4 bytes per selected sample: a job that leaves a few
// samples of every shard out costs memory that grows with the shards' bits, not 4 bytes
// a sample (issue 46).
#ifndef SHARDCAST_COMMON_PLAN_SELECTED_POSITIONS_H_
#define SHARDCAST_COMMON_PLAN_SELECTED_POSITIONS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace shardcast {

class SelectedPositions {
 public:
  SelectedPositions() = default;  // selects nothing
  // `positions` in increasing order, each below `shard_size`.
  SelectedPositions(const std::vector<uint32_t>& positions, uint32_t shard_size);

  uint32_t size() const { return count_; }
  // The position of the `k`-th selected sample (k < size()).
  uint32_t Position(uint32_t k) const;
  // Bytes held (for the tests' and docs' figures).
  size_t MemoryBytes() const {
    return words_.capacity() * sizeof(uint64_t) + block_counts_.capacity() * sizeof(uint32_t);
  }

 private:
  static constexpr uint32_t kWordsPerBlock = 8;  // a running count every 512 samples

  std::vector<uint64_t> words_;         // bit j of word w: position 64 w + j is selected
  std::vector<uint32_t> block_counts_;  // selected samples before each block of words
  uint32_t count_ = 0;
};

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_PLAN_SELECTED_POSITIONS_H_
