// The one admission of memory (common/memory/memory_budget.h) on its own: what can never
// fit is refused at once, what can waits and a release wakes it, first come first
// served, grants give their bytes back on every path, and threads together never hold
// more than the limit.
#include "common/memory/memory_budget.h"

#include <gtest/gtest.h>

#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace shardcast {
namespace {

// Waits (without a deadline: ctest's timeout is the bound) until `done()` holds.
template <typename Predicate>
void SpinUntil(Predicate done) {
  while (!done()) std::this_thread::yield();
}

MemoryBudget::Options Limit(int64_t limit) {
  MemoryBudget::Options options;
  options.limit = limit;
  return options;
}

TEST(MemoryBudgetTest, WhatCanNeverFitIsRefusedAtOnceInTheOwnersWords) {
  MemoryBudget::Options options = Limit(100);
  options.refusal = [](int64_t bytes) { return absl::StrCat("the test needs ", bytes); };
  MemoryBudget budget(std::move(options));
  ASSERT_TRUE(budget.Acquire(60).ok());
  // Over the whole limit: refused without waiting for the 60 in use.
  const absl::Status status = budget.Acquire(101);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(status.message(), "the test needs 101");
  EXPECT_EQ(budget.CheckFits(102).message(), "the test needs 102");
  EXPECT_TRUE(budget.CheckFits(100).ok());  // alone it fits, whatever is in use
  EXPECT_EQ(budget.Grant(1000).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(budget.refused(), 3);
  EXPECT_EQ(budget.waited(), 0);
  EXPECT_EQ(budget.in_use(), 60);
  budget.Release(60);

  MemoryBudget plain(Limit(10));
  EXPECT_EQ(plain.Acquire(11).message(),
            "11 bytes asked for, more than the whole limit of 10 bytes");
  ASSERT_TRUE(plain.Acquire(10).ok());  // exactly the limit fits
  plain.Release(10);
  EXPECT_EQ(plain.peak_in_use(), 10);
}

TEST(MemoryBudgetTest, AGrantGivesItsBytesBackWhenDestroyedResetOrAssignedOver) {
  MemoryBudget budget(Limit(100));
  {
    absl::StatusOr<MemoryGrant> grant = budget.Grant(30);
    ASSERT_TRUE(grant.ok()) << grant.status();
    EXPECT_EQ(grant->bytes(), 30);
    EXPECT_EQ(budget.in_use(), 30);
    MemoryGrant moved = *std::move(grant);  // the bytes move with it, not twice back
    EXPECT_EQ(budget.in_use(), 30);
    moved = *budget.Grant(20);  // the 30 go back, the 20 are held
    EXPECT_EQ(budget.in_use(), 20);
    moved.Reset();
    EXPECT_TRUE(moved.empty());
    EXPECT_EQ(budget.in_use(), 0);
    moved = *budget.Grant(-5);  // nothing negative is held or given back
    EXPECT_EQ(moved.bytes(), 0);
    std::optional<MemoryGrant> tried = budget.TryGrant(40);
    ASSERT_TRUE(tried.has_value());
    EXPECT_EQ(budget.in_use(), 40);
  }
  EXPECT_EQ(budget.in_use(), 0);
  // The 20 were granted before the 30 they were assigned over went back.
  EXPECT_EQ(budget.peak_in_use(), 50);
}

TEST(MemoryBudgetTest, TryGrantTakesOnlyWhatFitsNowWithItsHeadroom) {
  MemoryBudget budget(Limit(1000));
  std::optional<MemoryGrant> a = budget.TryGrant(300);
  ASSERT_TRUE(a.has_value());
  // 300 + 400 + a headroom of 300 is exactly the limit; 1 more is not.
  EXPECT_FALSE(budget.TryGrant(401, /*headroom=*/300).has_value());
  std::optional<MemoryGrant> b = budget.TryGrant(400, /*headroom=*/300);
  ASSERT_TRUE(b.has_value());
  EXPECT_FALSE(budget.TryGrant(301).has_value());
  EXPECT_EQ(budget.in_use(), 700);
  EXPECT_EQ(budget.refused(), 0);  // a try that does not fit now is no refusal
  EXPECT_EQ(budget.waited(), 0);
}

TEST(MemoryBudgetTest, AWaiterIsWokenByTheReleaseThatMakesRoom) {
  std::atomic<int> releases{0};
  MemoryBudget::Options options = Limit(100);
  options.on_release = [&releases] { releases.fetch_add(1); };
  MemoryBudget budget(std::move(options));
  std::optional<MemoryGrant> held = *budget.Grant(70);
  std::atomic<bool> admitted{false};
  std::thread waiter([&] {
    absl::StatusOr<MemoryGrant> grant = budget.Grant(50);
    ASSERT_TRUE(grant.ok()) << grant.status();
    admitted = true;
  });
  SpinUntil([&] { return budget.waited() == 1; });
  // 50 beside 70 does not fit: the waiter holds nothing and stays blocked.
  EXPECT_FALSE(admitted.load());
  EXPECT_EQ(budget.in_use(), 70);
  held.reset();  // the grant's release wakes it
  waiter.join();
  EXPECT_TRUE(admitted.load());
  EXPECT_EQ(budget.in_use(), 0);  // and its grant went back when its thread was done
  EXPECT_EQ(budget.peak_in_use(), 70);
  EXPECT_EQ(releases.load(), 2);
}

TEST(MemoryBudgetTest, WaitersAreAdmittedInArrivalOrderAndATryDoesNotOvertakeThem) {
  MemoryBudget budget(Limit(100));
  ASSERT_TRUE(budget.Acquire(80).ok());
  std::vector<int> order;
  absl::Mutex order_mu;
  // 50 does not fit beside 80: waits. 10 would fit, but arrives after 50 and must not
  // overtake it (a big request would otherwise starve behind small ones).
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
  EXPECT_FALSE(budget.TryGrant(10).has_value());  // room for it, but two wait before it
  EXPECT_EQ(budget.in_use(), 80);
  // Room for the 50 but then not for the 10: the 50 goes first and the 10 keeps
  // waiting (releasing all 80 would admit both, in an order up to the scheduler).
  budget.Release(30);
  big.join();
  EXPECT_EQ(budget.in_use(), 100);
  {
    absl::MutexLock lock(&order_mu);
    EXPECT_EQ(order, (std::vector<int>{50}));
  }
  budget.Release(50);
  small.join();
  EXPECT_EQ(order, (std::vector<int>{50, 10}));
  EXPECT_EQ(budget.in_use(), 60);
  budget.Release(60);
  EXPECT_TRUE(budget.TryGrant(100).has_value());  // nobody waits any more
  EXPECT_EQ(budget.peak_in_use(), 100);
}

TEST(MemoryBudgetTest, ManyThreadsNeverHoldMoreThanTheLimitAndTheImpossibleIsRefused) {
  MemoryBudget budget(Limit(100));
  std::atomic<int64_t> over{0};  // a thread that saw more than the limit in use
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&budget, &over, t] {
      for (int i = 0; i < 300; ++i) {
        const int64_t bytes = 10 + (t * 7 + i) % 50;
        if (i % 50 == 0) {  // now and then one that can never fit: refused, not a wait
          EXPECT_EQ(budget.Grant(101 + i).status().code(), absl::StatusCode::kResourceExhausted);
          continue;
        }
        std::optional<MemoryGrant> grant;
        if (i % 3 == 0) {
          grant = budget.TryGrant(bytes);
          if (!grant.has_value()) continue;
        } else {
          absl::StatusOr<MemoryGrant> waited = budget.Grant(bytes);
          ASSERT_TRUE(waited.ok()) << waited.status();
          grant = *std::move(waited);
        }
        if (budget.in_use() > 100) over.fetch_add(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(over.load(), 0);
  EXPECT_LE(budget.peak_in_use(), 100);
  EXPECT_EQ(budget.in_use(), 0);
  EXPECT_EQ(budget.refused(), 8 * 6);
}

}  // namespace
}  // namespace shardcast
