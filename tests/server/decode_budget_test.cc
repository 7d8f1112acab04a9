// The server-wide decode budget on its own (a MemoryBudget named for
// --max-decode-memory): an image alone over the limit is refused at once, a decode that
// does not fit waits for bytes to come back, admission is first come first served, and
// the peak never passes the limit.
#include "server/assembly/decode_budget.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace shardcast::server {
namespace {

// Waits (without a deadline: ctest's timeout is the bound) until `done()` holds.
template <typename Predicate>
void SpinUntil(Predicate done) {
  while (!done()) std::this_thread::yield();
}

TEST(DecodeBudgetTest, AnImageAloneOverTheLimitIsRefusedAtOnce) {
  MemoryBudget budget(DecodeBudgetOptions(100));
  const absl::Status status = budget.Acquire(101);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("--max-decode-memory"), absl::string_view::npos) << status;
  EXPECT_EQ(budget.refused(), 1);
  EXPECT_EQ(budget.in_use(), 0);
  ASSERT_TRUE(budget.Acquire(100).ok());  // exactly the limit fits
  budget.Release(100);
  EXPECT_EQ(budget.peak_in_use(), 100);
}

TEST(DecodeBudgetTest, CheckFitsRefusesAsAcquireDoesAndHoldsNothing) {
  MemoryBudget budget(DecodeBudgetOptions(100));
  ASSERT_TRUE(budget.Acquire(90).ok());
  EXPECT_TRUE(budget.CheckFits(100).ok());  // alone it fits, whatever is in use
  const absl::Status status = budget.CheckFits(101);
  EXPECT_EQ(status, budget.Acquire(101));
  EXPECT_EQ(budget.refused(), 2);
  EXPECT_EQ(budget.in_use(), 90);
  budget.Release(90);
}

TEST(DecodeBudgetTest, WaitsForBytesAndAdmitsInArrivalOrder) {
  MemoryBudget budget(DecodeBudgetOptions(100));
  ASSERT_TRUE(budget.Acquire(80).ok());
  std::vector<int> order;
  absl::Mutex order_mu;
  // 50 does not fit beside 80: waits. 10 would fit, but arrives after 50 and must not
  // overtake it (a big image would otherwise starve behind small ones).
  std::thread big([&] {
    ASSERT_TRUE(budget.Acquire(50).ok());
    absl::MutexLock lock(&order_mu);
    order.push_back(50);
  });
  SpinUntil([&] { return budget.waited() == 1; });
  std::thread small([&] {
    ASSERT_TRUE(budget.Acquire(10).ok());
    absl::MutexLock lock(&order_mu);
    order.push_back(10);
  });
  SpinUntil([&] { return budget.waited() == 2; });
  EXPECT_EQ(budget.in_use(), 80);
  // Room for the 50 but then not for the 10: the 50 goes first and the 10 keeps
  // waiting. (Releasing all 80 would admit both at once, and which thread then
  // records itself first is up to the scheduler, as a TSan run showed.)
  budget.Release(30);
  big.join();
  EXPECT_EQ(budget.in_use(), 100);
  {
    absl::MutexLock lock(&order_mu);
    EXPECT_EQ(order, (std::vector<int>{50}));
  }
  budget.Release(50);  // the 50's decode is done
  small.join();
  EXPECT_EQ(order, (std::vector<int>{50, 10}));
  EXPECT_EQ(budget.in_use(), 60);
  budget.Release(50);
  budget.Release(10);
  EXPECT_EQ(budget.in_use(), 0);
  EXPECT_EQ(budget.peak_in_use(), 100);
}

TEST(DecodeBudgetTest, ManyThreadsNeverHoldMoreThanTheLimit) {
  MemoryBudget budget(DecodeBudgetOptions(100));
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&budget, t] {
      for (int i = 0; i < 200; ++i) {
        const int64_t bytes = 10 + (t * 7 + i) % 50;
        ASSERT_TRUE(budget.Acquire(bytes).ok());
        EXPECT_LE(budget.in_use(), 100);
        budget.Release(bytes);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LE(budget.peak_in_use(), 100);
  EXPECT_EQ(budget.in_use(), 0);
  EXPECT_EQ(budget.refused(), 0);
}

}  // namespace
}  // namespace shardcast::server
