#include "common/plan/selected_positions.h"

#include <algorithm>

namespace shardcast {

SelectedPositions::SelectedPositions(const std::vector<uint32_t>& positions, uint32_t shard_size)
    : words_((static_cast<size_t>(shard_size) + 63) / 64, 0),
      count_(static_cast<uint32_t>(positions.size())) {
  for (uint32_t p : positions) words_[p / 64] |= uint64_t{1} << (p % 64);
  block_counts_.reserve((words_.size() + kWordsPerBlock - 1) / kWordsPerBlock);
  uint32_t before = 0;
  for (size_t w = 0; w < words_.size(); ++w) {
    if (w % kWordsPerBlock == 0) block_counts_.push_back(before);
    before += static_cast<uint32_t>(__builtin_popcountll(words_[w]));
  }
}

uint32_t SelectedPositions::Position(uint32_t k) const {
  // The last block that starts at or before the k-th selected sample.
  const size_t block =
      static_cast<size_t>(std::upper_bound(block_counts_.begin(), block_counts_.end(), k) -
                          block_counts_.begin()) -
      1;
  uint32_t rest = k - block_counts_[block];
  for (size_t w = block * kWordsPerBlock; w < words_.size(); ++w) {
    uint64_t word = words_[w];
    const uint32_t in_word = static_cast<uint32_t>(__builtin_popcountll(word));
    if (rest >= in_word) {
      rest -= in_word;
      continue;
    }
    for (; rest > 0; --rest) word &= word - 1;  // drop the lowest selected bits
    return static_cast<uint32_t>(w * 64 + __builtin_ctzll(word));
  }
  return 0;  // k >= size(): a caller's error; the planner never asks
}

}  // namespace shardcast
