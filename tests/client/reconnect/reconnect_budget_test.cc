// ReconnectBudget on made-up times: a broken stream is retried until the reconnect
// deadline after its first failure, a stalled one until one more stream timeout, and a
// batch ends both.
#include "client/reconnect/reconnect_budget.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"

namespace shardcast::client {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);
const absl::Status kRefused(absl::StatusCode::kUnavailable, "connection refused");

StreamSettings Settings() {
  StreamSettings settings;
  settings.server = "h:1";
  settings.reconnect_initial_seconds = 0.1;
  settings.reconnect_max_seconds = 2;
  settings.reconnect_deadline_seconds = 30;
  settings.stream_timeout_seconds = 10;
  return settings;
}

const StreamPosition kAt{"job", 1, 2, 5};

TEST(ReconnectBudgetTest, ABrokenStreamIsRetriedUntilTheReconnectDeadline) {
  ReconnectBudget budget(Settings());
  EXPECT_EQ(budget.GiveUp(), absl::InfiniteFuture());
  EXPECT_TRUE(budget.Failed(kT0, kRefused, /*stalled=*/false, kAt, 8).ok());
  EXPECT_EQ(budget.GiveUp(), kT0 + absl::Seconds(30));
  EXPECT_EQ(budget.TakeBackoff(kT0), absl::Milliseconds(100));
  EXPECT_EQ(budget.TakeBackoff(kT0), absl::Milliseconds(200));
  EXPECT_EQ(budget.TakeBackoff(kT0 + absl::Seconds(29.9)), absl::Milliseconds(100));  // clipped
  const absl::Status give_up =
      budget.Failed(kT0 + absl::Seconds(30), kRefused, /*stalled=*/false, kAt, 8);
  EXPECT_EQ(give_up.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(give_up.message(),
            "job 'job' rank 1 epoch 2: stream broken at batch 5 of 8 and server h:1 not back "
            "within 30.0 s (2 attempts); last error: UNAVAILABLE: connection refused");
}

TEST(ReconnectBudgetTest, AStalledStreamGetsOneMoreStreamTimeout) {
  ReconnectBudget budget(Settings());
  EXPECT_EQ(budget.ReadDeadline(kT0), kT0 + absl::Seconds(10));
  EXPECT_TRUE(budget.Failed(kT0, kRefused, /*stalled=*/true, kAt, 8).ok());
  EXPECT_EQ(budget.GiveUp(), kT0 + absl::Seconds(10));
  // While stalled, a read is due no later than the give-up time.
  EXPECT_EQ(budget.ReadDeadline(kT0 + absl::Seconds(4)), kT0 + absl::Seconds(10));
  const absl::Status give_up =
      budget.Failed(kT0 + absl::Seconds(10), kRefused, /*stalled=*/false, kAt, 8);
  EXPECT_EQ(give_up.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(give_up.message(), "no batch from server h:1 for 10 s")) << give_up;
}

TEST(ReconnectBudgetTest, ABatchEndsTheRunOfFailuresAndTheStall) {
  ReconnectBudget budget(Settings());
  EXPECT_TRUE(budget.Failed(kT0, kRefused, /*stalled=*/true, kAt, 8).ok());
  budget.BatchArrived();
  EXPECT_EQ(budget.GiveUp(), absl::InfiniteFuture());
  EXPECT_EQ(budget.ReadDeadline(kT0 + absl::Seconds(1)), kT0 + absl::Seconds(11));
  EXPECT_EQ(budget.TakeBackoff(kT0), absl::Milliseconds(100));  // the backoff starts over
}

TEST(ReconnectBudgetTest, WithoutAStreamTimeoutNoReadIsOverdue) {
  StreamSettings settings = Settings();
  settings.stream_timeout_seconds = 0;
  ReconnectBudget budget(settings);
  EXPECT_EQ(budget.ReadDeadline(kT0), absl::InfiniteFuture());
}

}  // namespace
}  // namespace shardcast::client
