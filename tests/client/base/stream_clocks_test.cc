// RetryClock and StallClock, the prefetch loop's clocks, on made-up times.
#include "client/base/stream_clocks.h"

#include <gtest/gtest.h>

namespace shardcast::client {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(RetryClockTest, ARunOfFailuresIsRetriedUntilTheDeadlineAfterItsFirstFailure) {
  RetryClock retry(absl::Milliseconds(100), absl::Seconds(2), absl::Seconds(30));
  EXPECT_EQ(retry.GiveUp(), absl::InfiniteFuture());
  retry.Failed(kT0, "UNAVAILABLE: a");
  retry.Failed(kT0 + absl::Seconds(5), "UNAVAILABLE: b");  // the run started at kT0
  EXPECT_EQ(retry.GiveUp(), kT0 + absl::Seconds(30));
  EXPECT_EQ(retry.attempts(), 2);
  EXPECT_EQ(retry.last_error(), "UNAVAILABLE: b");
  retry.Reset();
  EXPECT_EQ(retry.GiveUp(), absl::InfiniteFuture());
  EXPECT_EQ(retry.attempts(), 0);
}

TEST(RetryClockTest, BackoffDoublesToItsMaximumAndNeverPassesTheGiveUpTime) {
  RetryClock retry(absl::Milliseconds(100), absl::Milliseconds(350), absl::Seconds(30));
  const absl::Time far = kT0 + absl::Hours(1);
  EXPECT_EQ(retry.TakeBackoff(kT0, far), absl::Milliseconds(100));
  EXPECT_EQ(retry.TakeBackoff(kT0, far), absl::Milliseconds(200));
  EXPECT_EQ(retry.TakeBackoff(kT0, far), absl::Milliseconds(350));
  EXPECT_EQ(retry.TakeBackoff(kT0, far), absl::Milliseconds(350));
  EXPECT_EQ(retry.TakeBackoff(kT0, kT0 + absl::Milliseconds(30)), absl::Milliseconds(30));
  retry.Reset();
  EXPECT_EQ(retry.TakeBackoff(kT0, far), absl::Milliseconds(100));
}

TEST(StallClockTest, OnlyTheFirstCutSinceTheLastBatchStartsIt) {
  StallClock stall(absl::Seconds(10));
  EXPECT_FALSE(stall.stalled());
  EXPECT_EQ(stall.GiveUp(), absl::InfiniteFuture());
  stall.Cut(kT0);
  stall.Cut(kT0 + absl::Seconds(4));
  EXPECT_TRUE(stall.stalled());
  EXPECT_EQ(stall.GiveUp(), kT0 + absl::Seconds(10));
  stall.BatchArrived();
  EXPECT_FALSE(stall.stalled());
  EXPECT_EQ(stall.GiveUp(), absl::InfiniteFuture());
}

TEST(StallClockTest, ReadDeadlineIsOneTimeoutAwayAndNoLaterThanGivingUpWhileStalled) {
  StallClock stall(absl::Seconds(10));
  const absl::Time now = kT0 + absl::Seconds(3);
  EXPECT_EQ(stall.ReadDeadline(now, kT0 + absl::Seconds(5)), now + absl::Seconds(10));
  stall.Cut(kT0);
  EXPECT_EQ(stall.ReadDeadline(now, kT0 + absl::Seconds(5)), kT0 + absl::Seconds(5));
  EXPECT_EQ(StallClock(absl::ZeroDuration()).ReadDeadline(now, now), absl::InfiniteFuture());
}

}  // namespace
}  // namespace shardcast::client
