// The fetcher's retry rules (common/remote/http_retry.h) driven by made-up answers on
// a fake clock: which statuses are retried, Retry-After, cut bodies, the deadline. No
// server and no sleep: a schedule of seconds runs in microseconds. The same faults
// against real stores stay in http_fetcher_test.cc.
#include "common/remote/http_retry.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "absl/time/time.h"
#include "common/util/retry_policy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/fake_clock.h"

namespace shardcast::remote::internal {
namespace {

using ::testing::HasSubstr;
using util_testing::FakeClock;

FetchOptions Options() {
  FetchOptions options;
  options.request_deadline = absl::Seconds(10);
  options.first_backoff = absl::Milliseconds(100);
  options.max_backoff = absl::Seconds(1);
  options.max_retry_after = absl::Seconds(5);
  return options;
}

util::RetryPolicy Policy(const FetchOptions& options, const FakeClock& clock) {
  util::RetryOptions retry = FetchRetryOptions(options);
  retry.jitter_seed = 7;
  return util::RetryPolicy(retry, &clock);
}

TEST(HttpRetryTest, ServerErrorsTimeoutsAndThrottlingAreRetriedOtherAnswersAreNot) {
  for (long status : {500L, 502L, 503L, 504L, 599L, 408L, 429L}) {
    EXPECT_TRUE(IsRetryableHttpStatus(status)) << status;
  }
  for (long status : {200L, 206L, 301L, 400L, 401L, 403L, 404L, 412L, 416L}) {
    EXPECT_FALSE(IsRetryableHttpStatus(status)) << status;
  }
}

TEST(HttpRetryTest, RetryAfterInSecondsOrAsADate) {
  const absl::Time now = absl::FromUnixSeconds(1'700'000'000);  // 2023-11-14T22:13:20Z
  EXPECT_EQ(ParseRetryAfter("3", now), absl::Seconds(3));
  EXPECT_EQ(ParseRetryAfter("-4", now), absl::ZeroDuration());
  EXPECT_EQ(ParseRetryAfter("Tue, 14 Nov 2023 22:13:50 GMT", now), absl::Seconds(30));
  EXPECT_EQ(ParseRetryAfter("Tue, 14 Nov 2023 22:00:00 GMT", now), absl::ZeroDuration());
  EXPECT_EQ(ParseRetryAfter("soon", now), std::nullopt);
}

// A store answering 503 until the deadline: waits with jitter (at most half a backoff
// more), doubling up to max_backoff, all before the deadline; then the fetcher gives up.
TEST(HttpRetryTest, AStoreFailingUntilTheDeadlineIsRetriedWithBackoffThenGivenUp) {
  const FetchOptions options = Options();
  FakeClock clock;
  util::RetryPolicy policy = Policy(options, clock);
  absl::Duration backoff = options.first_backoff;
  int waits = 0;
  while (true) {
    const RetryStep step = NextRetryStep(policy, {"HTTP 503 Service Unavailable", {}, false},
                                         "GET http://store/a.tar");
    if (step.kind == RetryStep::kDeadline) break;
    ASSERT_EQ(step.kind, RetryStep::kWait);
    EXPECT_GE(step.wait, backoff);
    EXPECT_LE(step.wait, backoff + backoff / 2);
    backoff = std::min(backoff * 2, options.max_backoff);
    EXPECT_TRUE(policy.Wait(step.wait));
    ++waits;
  }
  EXPECT_LT(clock.Now(), policy.deadline());      // never waited past it
  EXPECT_GT(policy.Elapsed(), absl::Seconds(8));  // but waited out nearly all of it
  EXPECT_GE(waits, 9);
}

TEST(HttpRetryTest, RetryAfterIsWaitedForUpToItsBoundThenRefused) {
  const FetchOptions options = Options();
  FakeClock clock;
  util::RetryPolicy policy = Policy(options, clock);
  RetryStep step = NextRetryStep(policy, {"HTTP 429 Too Many Requests", absl::Seconds(3), false},
                                 "GET http://store/a.tar");
  ASSERT_EQ(step.kind, RetryStep::kWait);
  EXPECT_EQ(step.wait, absl::Seconds(3));

  step = NextRetryStep(policy, {"HTTP 503 Service Unavailable", absl::Seconds(6), false},
                       "GET http://store/a.tar");
  ASSERT_EQ(step.kind, RetryStep::kRefused);
  EXPECT_TRUE(absl::IsUnavailable(step.refusal));
  EXPECT_THAT(step.refusal.message(), HasSubstr("GET http://store/a.tar: HTTP 503"));
  EXPECT_THAT(step.refusal.message(), HasSubstr("asks to retry after 6s, longer than the 5s"));
}

// A Retry-After that would end past the deadline is not waited for.
TEST(HttpRetryTest, RetryAfterPastTheDeadlineGivesUpAtOnce) {
  const FetchOptions options = Options();
  FakeClock clock;
  util::RetryPolicy policy = Policy(options, clock);
  clock.Advance(absl::Seconds(7));
  EXPECT_EQ(NextRetryStep(policy, {"HTTP 503", absl::Seconds(4), false}, "GET u").kind,
            RetryStep::kDeadline);
  EXPECT_TRUE(clock.waits().empty());
}

// A body cut after some bytes starts the backoff over (not a store getting worse); and
// with a deadline that follows progress, the bytes move the deadline too.
TEST(HttpRetryTest, ACutBodyThatDeliveredBytesStartsTheBackoffOver) {
  const FetchOptions options = Options();
  FakeClock clock;
  util::RetryPolicy policy = Policy(options, clock);
  for (int i = 0; i < 4; ++i) {
    NextRetryStep(policy, {"Connection reset", {}, false}, "GET u");  // 100 .. 800 ms
  }
  const RetryStep step = NextRetryStep(policy, {"the body ended at byte 10", {}, true}, "GET u");
  ASSERT_EQ(step.kind, RetryStep::kWait);
  EXPECT_LE(step.wait, absl::Milliseconds(150));

  clock.Advance(absl::Seconds(11));
  EXPECT_EQ(NextRetryStep(policy, {"cut", {}, true}, "GET u").kind, RetryStep::kDeadline);
  policy.MoveDeadline(clock.Now() + options.request_deadline);  // GetStreaming's progress
  EXPECT_EQ(NextRetryStep(policy, {"cut", {}, true}, "GET u").kind, RetryStep::kWait);
}

}  // namespace
}  // namespace shardcast::remote::internal
