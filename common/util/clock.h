// The time that retries, deadlines and TTLs read, and the waits between attempts.
// Production code runs on Clock::Real(); tests pass a clock they move themselves
// (tests/support/fake_clock.h), so that a backoff of seconds or a TTL of an hour is
// checked in microseconds of wall time.
//
// A wait between attempts is always cancellable (CancelToken): no thread sleeps where a
// stop or a cancel must wake it.
#ifndef SHARDCAST_COMMON_UTIL_CLOCK_H_
#define SHARDCAST_COMMON_UTIL_CLOCK_H_

#include <algorithm>
#include <atomic>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace shardcast::util {

// What ends a wait early. Cancel() wakes every wait on the token at once. A token can
// also watch a flag owned by code that cannot call Cancel() (the serve path's
// per-stream cancel flag, set by the stream): a wait re-reads that flag every
// kFlagPoll, so it ends at most that long after the flag is set.
//
// Thread-safe.
class CancelToken {
 public:
  static constexpr absl::Duration kFlagPoll = absl::Milliseconds(5);

  CancelToken() = default;
  // Also cancelled while `*flag` is true. `flag` (not owned) must outlive the token.
  explicit CancelToken(const std::atomic<bool>* flag) : flag_(flag) {}
  CancelToken(const CancelToken&) = delete;
  CancelToken& operator=(const CancelToken&) = delete;

  void Cancel() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
  }
  // Arms the token again (a worker restarted after a stop); the watched flag stays.
  void Reset() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    cancelled_ = false;
  }
  bool cancelled() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return Done();
  }

  // Blocks until the real time `deadline` or until cancelled, whichever comes first;
  // true when cancelled (also when it already was). Used by RealClock::WaitFor.
  bool AwaitUntil(absl::Time deadline) const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    const auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return Done(); };
    while (!done()) {
      const absl::Time now = absl::Now();
      if (now >= deadline) return false;
      // Cancel() signals the condition at once; a watched flag is only seen when read.
      const absl::Time until = flag_ == nullptr ? deadline : std::min(deadline, now + kFlagPoll);
      mu_.AwaitWithDeadline(absl::Condition(&done), until);
    }
    return true;
  }

 private:
  bool Done() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return cancelled_ || (flag_ != nullptr && flag_->load(std::memory_order_acquire));
  }

  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  const std::atomic<bool>* const flag_ = nullptr;
};

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;

  // Waits `duration` unless `cancel` (null: nothing cancels it) is cancelled first;
  // returns at once when it already is. True when the whole duration passed, false
  // when cancelled.
  virtual bool WaitFor(absl::Duration duration, const CancelToken* cancel) const = 0;

  // absl::Now() and real waits; lives for the whole process.
  static const Clock* Real();
};

class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  bool WaitFor(absl::Duration duration, const CancelToken* cancel) const override {
    const absl::Time deadline = absl::Now() + duration;
    if (cancel != nullptr) return !cancel->AwaitUntil(deadline);
    const CancelToken never;
    return !never.AwaitUntil(deadline);
  }
};

inline const Clock* Clock::Real() {
  static const RealClock* const real = new RealClock();
  return real;
}

}  // namespace shardcast::util

#endif  // SHARDCAST_COMMON_UTIL_CLOCK_H_
