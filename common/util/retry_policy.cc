// RetryPolicy (see retry_policy.h).
#include "common/util/retry_policy.h"

#include <algorithm>
#include <random>

namespace shardcast::util {

namespace {
uint64_t JitterSeed(uint64_t seed) {
  if (seed != 0) return seed;
  std::random_device device;
  return (uint64_t{device()} << 32) ^ device();
}
}  // namespace

RetryPolicy::RetryPolicy(const RetryOptions& options, const Clock* clock)
    : options_(options),
      clock_(clock),
      start_(clock->Now()),
      deadline_(start_ + options.window),
      backoff_(options.first_backoff),
      random_(JitterSeed(options.jitter_seed)) {}

RetryPolicy::Decision RetryPolicy::AfterFailure(std::optional<absl::Duration> retry_after) {
  if (retry_after.has_value() && *retry_after > options_.max_retry_after) {
    return {Verdict::kRetryAfterTooLong, *retry_after};
  }
  absl::Duration wait = backoff_ + Jitter(backoff_);
  backoff_ = std::min(backoff_ * 2, options_.max_backoff);
  if (retry_after.has_value()) wait = std::max(wait, *retry_after);
  const absl::Time now = clock_->Now();
  if (now >= deadline_) return {Verdict::kDeadline, absl::ZeroDuration()};
  if (now + wait >= deadline_) {
    if (!options_.last_attempt_at_deadline) return {Verdict::kDeadline, absl::ZeroDuration()};
    wait = deadline_ - now;
  }
  ++retries_;
  return {Verdict::kRetry, wait};
}

absl::Duration RetryPolicy::Jitter(absl::Duration backoff) {
  if (options_.jitter <= 0) return absl::ZeroDuration();
  const int64_t max_us = static_cast<int64_t>(
      static_cast<double>(absl::ToInt64Microseconds(backoff)) * options_.jitter);
  if (max_us <= 0) return absl::ZeroDuration();
  return absl::Microseconds(static_cast<int64_t>(random_.Below(static_cast<uint64_t>(max_us) + 1)));
}

}  // namespace shardcast::util
