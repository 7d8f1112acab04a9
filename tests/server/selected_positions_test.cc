// SelectedPositions against the list of positions it replaces: random shards of random
// sizes and densities (empty, full, one sample, blocks without any), every k.
#include "common/plan/selected_positions.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace shardcast {
namespace {

TEST(SelectedPositionsTest, EveryKthPositionIsTheListsOnRandomShards) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    const uint32_t shard_size = std::uniform_int_distribution<uint32_t>(0, 5000)(rng);
    // Densities from none to all, and runs of unselected samples longer than a block.
    const double density = std::uniform_real_distribution<double>(0, 1)(rng);
    const uint32_t gap_from = std::uniform_int_distribution<uint32_t>(0, shard_size)(rng);
    const uint32_t gap_to = std::min<uint32_t>(shard_size, gap_from + (trial % 3) * 1100);
    std::vector<uint32_t> positions;
    for (uint32_t p = 0; p < shard_size; ++p) {
      if ((p < gap_from || p >= gap_to) && std::bernoulli_distribution(density)(rng)) {
        positions.push_back(p);
      }
    }
    const SelectedPositions selected(positions, shard_size);
    ASSERT_EQ(selected.size(), positions.size());
    for (uint32_t k = 0; k < positions.size(); ++k) {
      ASSERT_EQ(selected.Position(k), positions[k])
          << "trial " << trial << ", shard of " << shard_size << ", k " << k;
    }
  }
}

TEST(SelectedPositionsTest, EdgesOfWordsAndBlocks) {
  for (uint32_t shard_size : {1u, 63u, 64u, 65u, 511u, 512u, 513u, 1024u}) {
    std::vector<uint32_t> all;
    for (uint32_t p = 0; p < shard_size; ++p) all.push_back(p);
    const SelectedPositions every(all, shard_size);
    for (uint32_t k = 0; k < shard_size; ++k) ASSERT_EQ(every.Position(k), k);
    const SelectedPositions last({shard_size - 1}, shard_size);
    EXPECT_EQ(last.size(), 1u);
    EXPECT_EQ(last.Position(0), shard_size - 1);
  }
}

// 10,000 samples of which 9,999 selected: about 0.19 bytes a sample of the shard, where
// the list took 4 bytes a selected sample.
TEST(SelectedPositionsTest, HoldsUnderABytePerSample) {
  std::vector<uint32_t> positions;
  for (uint32_t p = 1; p < 10000; ++p) positions.push_back(p);
  const SelectedPositions selected(positions, 10000);
  EXPECT_LT(selected.MemoryBytes(), 10000 / 4);
  EXPECT_EQ(selected.Position(0), 1u);
  EXPECT_EQ(selected.Position(9998), 9999u);
}

}  // namespace
}  // namespace shardcast
