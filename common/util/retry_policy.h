// The one retry policy of the project: exponential backoff with jitter, a deadline,
// and a server's Retry-After honoured up to a bound, on an injected clock whose waits a
// cancel ends at once. Used by the HTTP fetcher (common/remote/http_fetcher.cc), the
// serve path's shard-read retry (server/assembly/batch_assembler.cc) and the client's
// registration.
//
// The policy decides and waits; the caller runs the attempts, so that what an attempt
// is (a request, a read, an RPC to the next replica) and what its errors say stay with
// the caller.
#ifndef SHARDCAST_COMMON_UTIL_RETRY_POLICY_H_
#define SHARDCAST_COMMON_UTIL_RETRY_POLICY_H_

#include <cstdint>
#include <optional>

#include "absl/time/time.h"
#include "common/util/clock.h"
#include "common/util/splitmix64.h"

namespace shardcast::util {

struct RetryOptions {
  absl::Duration first_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);  // the backoff doubles up to this
  // Each wait is its backoff plus up to this fraction of it more, at random, so that
  // many clients failed at once do not come back at once. 0: exactly the backoff.
  double jitter = 0;
  // How long attempts go on, from the policy's start (MoveDeadline moves the end).
  absl::Duration window = absl::InfiniteDuration();
  // A wait that would reach the deadline: true cuts it short to end on the deadline
  // (one last attempt there: registration, whose attempts fail fast); false ends the
  // retries at once (a read: waiting only to fail would delay the same answer).
  bool last_attempt_at_deadline = false;
  // A Retry-After longer than this ends the retries (kRetryAfterTooLong) instead of
  // being waited for.
  absl::Duration max_retry_after = absl::InfiniteDuration();
  // The jitter's generator; 0 seeds it from std::random_device (tests fix it).
  uint64_t jitter_seed = 0;
};

// One run of attempts. Not thread-safe: a policy belongs to the one call it paces.
class RetryPolicy {
 public:
  enum class Verdict {
    kRetry,              // wait `wait`, then attempt again
    kDeadline,           // the deadline passed, or would before the next attempt
    kRetryAfterTooLong,  // the server asked for a wait over max_retry_after
  };
  struct Decision {
    Verdict verdict = Verdict::kRetry;
    absl::Duration wait = absl::ZeroDuration();  // kRetry: before the next attempt;
                                                 // kRetryAfterTooLong: what was asked
  };

  // Starts the window at clock->Now(). `clock` (not owned) must outlive the policy.
  explicit RetryPolicy(const RetryOptions& options, const Clock* clock = Clock::Real());

  // After a failed attempt, with the server's Retry-After when it sent one: how long to
  // wait before the next attempt, or why there is none. Each kRetry doubles the next
  // backoff (up to max_backoff) and counts one retry.
  Decision AfterFailure(std::optional<absl::Duration> retry_after = std::nullopt);

  // Waits `wait` on the clock unless `cancel` (null: nothing) is cancelled first; false
  // when cancelled.
  bool Wait(absl::Duration wait, const CancelToken* cancel = nullptr) const {
    return clock_->WaitFor(wait, cancel);
  }

  // Progress was made (a cut body delivered bytes: not a store getting worse): the next
  // backoff is first_backoff again.
  void ResetBackoff() { backoff_ = options_.first_backoff; }
  // The deadline moves (a deadline that follows progress: the last byte + window).
  void MoveDeadline(absl::Time deadline) { deadline_ = deadline; }

  // Whether the deadline has passed.
  bool Expired() const { return clock_->Now() >= deadline_; }
  absl::Time start() const { return start_; }
  absl::Time deadline() const { return deadline_; }
  absl::Duration Elapsed() const { return clock_->Now() - start_; }
  int retries() const { return retries_; }  // kRetry decisions so far
  const Clock& clock() const { return *clock_; }
  const RetryOptions& options() const { return options_; }

 private:
  absl::Duration Jitter(absl::Duration backoff);

  const RetryOptions options_;
  const Clock* const clock_;
  const absl::Time start_;
  absl::Time deadline_;
  absl::Duration backoff_;
  int retries_ = 0;
  SplitMix64 random_;
};

}  // namespace shardcast::util

#endif  // SHARDCAST_COMMON_UTIL_RETRY_POLICY_H_
