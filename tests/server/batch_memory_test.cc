// The batch memory budget's per-stream shares (assembly/batch_memory.h): the guaranteed
// batch holds the stream's bound for its life, each extra batch reserves its own bytes.
#include "server/assembly/batch_memory.h"

#include <gtest/gtest.h>

#include <memory>

namespace shardcast::server {
namespace {

TEST(StreamMemoryTest, ExtraBatchesReserveTheirOwnBytesWithAGuaranteedBatchOfHeadroom) {
  MemoryBudget budget(BatchMemoryOptions(1000, nullptr));
  auto memory = StreamMemory::Create(&budget, /*batch_bytes=*/300);
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_EQ(budget.in_use(), 300);
  BatchGrant guaranteed;
  ASSERT_TRUE((*memory)->TryAcquire(120, &guaranteed));  // the guaranteed batch: no more
  EXPECT_EQ(budget.in_use(), 300);
  {
    BatchGrant small;
    ASSERT_TRUE((*memory)->TryAcquire(120, &small));
    EXPECT_EQ(budget.in_use(), 420);
    BatchGrant large;
    ASSERT_TRUE((*memory)->TryAcquire(280, &large));
    EXPECT_EQ(budget.in_use(), 700);
    // 700 + 10 leaves less than one guaranteed batch (300) for a stream to come.
    BatchGrant refused;
    EXPECT_FALSE((*memory)->TryAcquire(10, &refused));
    EXPECT_EQ(budget.in_use(), 700);
  }
  EXPECT_EQ(budget.in_use(), 300);  // the extras went back, each its own bytes
  (*memory)->Close();
  EXPECT_EQ(budget.in_use(), 300);  // still held by the guaranteed batch's grant
  guaranteed = BatchGrant();
  EXPECT_EQ(budget.in_use(), 0);
}

}  // namespace
}  // namespace shardcast::server
