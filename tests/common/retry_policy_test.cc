// The retry policy (common/util/retry_policy.h) on a fake clock: backoff, jitter,
// deadline, Retry-After, cancel; and the real clock's cancellable wait.
#include "common/util/retry_policy.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/util/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/fake_clock.h"

namespace shardcast::util {
namespace {

using ::testing::ElementsAre;
using util_testing::FakeClock;
using Verdict = RetryPolicy::Verdict;

RetryOptions Options() {
  RetryOptions options;
  options.first_backoff = absl::Milliseconds(100);
  options.max_backoff = absl::Milliseconds(800);
  options.window = absl::Seconds(10);
  return options;
}

// Fails every attempt, waiting each decision out, until the policy stops; the waits.
std::vector<absl::Duration> RunOut(RetryPolicy& policy, RetryPolicy::Verdict* last) {
  std::vector<absl::Duration> waits;
  while (true) {
    const RetryPolicy::Decision decision = policy.AfterFailure();
    if (decision.verdict != Verdict::kRetry) {
      *last = decision.verdict;
      return waits;
    }
    waits.push_back(decision.wait);
    EXPECT_TRUE(policy.Wait(decision.wait));
  }
}

TEST(RetryPolicyTest, BackoffDoublesUpToItsMaximum) {
  FakeClock clock;
  RetryOptions options = Options();
  options.window = absl::Seconds(3);
  RetryPolicy policy(options, &clock);
  Verdict last;
  const std::vector<absl::Duration> waits = RunOut(policy, &last);
  // 100+200+400+800+800 = 2.3 s; the next 800 ms would reach the 3 s deadline.
  EXPECT_THAT(waits,
              ElementsAre(absl::Milliseconds(100), absl::Milliseconds(200), absl::Milliseconds(400),
                          absl::Milliseconds(800), absl::Milliseconds(800)));
  EXPECT_EQ(last, Verdict::kDeadline);
  EXPECT_EQ(policy.retries(), 5);
  EXPECT_EQ(clock.waits(), waits);  // the waits were the clock's, not a thread's sleep
  EXPECT_EQ(policy.Elapsed(), absl::Milliseconds(2300));
}

TEST(RetryPolicyTest, LastAttemptAtDeadlineCutsTheLastWaitShort) {
  FakeClock clock;
  RetryOptions options = Options();
  options.window = absl::Seconds(1);
  options.last_attempt_at_deadline = true;
  RetryPolicy policy(options, &clock);
  Verdict last;
  const std::vector<absl::Duration> waits = RunOut(policy, &last);
  // 100 + 200 + 400, then 300 (not 800) to end on the deadline; then it has passed.
  EXPECT_THAT(waits, ElementsAre(absl::Milliseconds(100), absl::Milliseconds(200),
                                 absl::Milliseconds(400), absl::Milliseconds(300)));
  EXPECT_EQ(last, Verdict::kDeadline);
  EXPECT_TRUE(policy.Expired());
}

TEST(RetryPolicyTest, TimeSpentInAttemptsCountsTowardTheDeadline) {
  FakeClock clock;
  RetryPolicy policy(Options(), &clock);
  EXPECT_EQ(policy.AfterFailure().verdict, Verdict::kRetry);
  clock.Advance(absl::Seconds(9) + absl::Milliseconds(850));  // a slow attempt
  // 200 ms more would pass the 10 s deadline.
  EXPECT_EQ(policy.AfterFailure().verdict, Verdict::kDeadline);
}

TEST(RetryPolicyTest, JitterAddsUpToItsFractionAndVaries) {
  FakeClock clock;
  RetryOptions options = Options();
  options.first_backoff = options.max_backoff = absl::Seconds(1);
  options.window = absl::InfiniteDuration();
  options.jitter = 0.5;
  options.jitter_seed = 42;
  RetryPolicy policy(options, &clock);
  std::vector<absl::Duration> waits;
  for (int i = 0; i < 100; ++i) {
    const RetryPolicy::Decision decision = policy.AfterFailure();
    ASSERT_EQ(decision.verdict, Verdict::kRetry);
    EXPECT_GE(decision.wait, absl::Seconds(1));
    EXPECT_LE(decision.wait, absl::Milliseconds(1500));
    waits.push_back(decision.wait);
  }
  std::sort(waits.begin(), waits.end());
  EXPECT_LT(waits.front() + absl::Milliseconds(100), waits.back());  // spread, not one value

  // The same seed, the same waits: a test can pin them.
  RetryPolicy again(options, &clock);
  RetryPolicy once_more(options, &clock);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(again.AfterFailure().wait, once_more.AfterFailure().wait);
  }
}

TEST(RetryPolicyTest, RetryAfterIsHonouredUpToItsBound) {
  FakeClock clock;
  RetryOptions options = Options();
  options.max_retry_after = absl::Seconds(5);
  RetryPolicy policy(options, &clock);
  // Longer than the backoff: the server's wait.
  RetryPolicy::Decision decision = policy.AfterFailure(absl::Seconds(2));
  EXPECT_EQ(decision.verdict, Verdict::kRetry);
  EXPECT_EQ(decision.wait, absl::Seconds(2));
  // Shorter than the backoff (now 200 ms): the backoff.
  decision = policy.AfterFailure(absl::Milliseconds(1));
  EXPECT_EQ(decision.wait, absl::Milliseconds(200));
  // Over the bound: not waited for.
  decision = policy.AfterFailure(absl::Seconds(6));
  EXPECT_EQ(decision.verdict, Verdict::kRetryAfterTooLong);
  EXPECT_EQ(decision.wait, absl::Seconds(6));
  // Past the deadline: the deadline wins.
  clock.Advance(absl::Seconds(8));
  EXPECT_EQ(policy.AfterFailure(absl::Seconds(3)).verdict, Verdict::kDeadline);
}

TEST(RetryPolicyTest, ProgressResetsTheBackoffAndMovesTheDeadline) {
  FakeClock clock;
  RetryPolicy policy(Options(), &clock);
  for (int i = 0; i < 3; ++i) policy.AfterFailure();  // 100, 200, 400
  policy.ResetBackoff();
  EXPECT_EQ(policy.AfterFailure().wait, absl::Milliseconds(100));
  clock.Advance(absl::Seconds(20));
  EXPECT_EQ(policy.AfterFailure().verdict, Verdict::kDeadline);
  policy.MoveDeadline(clock.Now() + absl::Seconds(10));
  EXPECT_FALSE(policy.Expired());
  EXPECT_EQ(policy.AfterFailure().verdict, Verdict::kRetry);
}

TEST(RetryPolicyTest, ACancelledWaitReturnsAtOnceWithoutTheTimePassing) {
  FakeClock clock;
  RetryPolicy policy(Options(), &clock);
  CancelToken cancel;
  const absl::Time before = clock.Now();
  clock.set_on_wait([&cancel](absl::Duration) { cancel.Cancel(); });  // cancelled mid-wait
  EXPECT_FALSE(policy.Wait(absl::Seconds(1), &cancel));
  EXPECT_EQ(clock.Now(), before);
  // Already cancelled: no wait begins.
  EXPECT_FALSE(policy.Wait(absl::Seconds(1), &cancel));
  EXPECT_EQ(clock.waits().size(), 1u);
}

TEST(CancelTokenTest, WatchesAFlagItDoesNotOwn) {
  std::atomic<bool> flag{false};
  CancelToken token(&flag);
  EXPECT_FALSE(token.cancelled());
  flag = true;
  EXPECT_TRUE(token.cancelled());
  flag = false;
  token.Cancel();
  EXPECT_TRUE(token.cancelled());
  token.Reset();
  EXPECT_FALSE(token.cancelled());
}

// The real clock: a wait of a minute that another thread's Cancel() (or a watched flag)
// ends. Were the wait not woken it would return true after the minute; no timing is
// asserted.
TEST(RealClockTest, CancelWakesAWaitOnAnotherThread) {
  CancelToken token;
  std::thread canceller([&token] {
    absl::SleepFor(absl::Milliseconds(20));
    token.Cancel();
  });
  EXPECT_FALSE(Clock::Real()->WaitFor(absl::Minutes(1), &token));
  canceller.join();
}

TEST(RealClockTest, AWatchedFlagEndsAWait) {
  std::atomic<bool> flag{false};
  CancelToken token(&flag);
  std::thread canceller([&flag] {
    absl::SleepFor(absl::Milliseconds(20));
    flag = true;
  });
  EXPECT_FALSE(Clock::Real()->WaitFor(absl::Minutes(1), &token));
  canceller.join();
}

TEST(RealClockTest, AnUncancelledWaitLastsItsDuration) {
  const absl::Time start = absl::Now();
  CancelToken token;
  EXPECT_TRUE(Clock::Real()->WaitFor(absl::Milliseconds(20), &token));
  EXPECT_TRUE(Clock::Real()->WaitFor(absl::Milliseconds(20), nullptr));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(40));
}

}  // namespace
}  // namespace shardcast::util
