// A clock the test moves (common/util/clock.h): TTLs, idle and stall rules, backoffs
// and retry windows are checked by advancing it past their limits instead of sleeping
// for them.
#ifndef SHARDCAST_TESTS_SUPPORT_FAKE_CLOCK_H_
#define SHARDCAST_TESTS_SUPPORT_FAKE_CLOCK_H_

#include <functional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/util/clock.h"

namespace shardcast::util_testing {

// Thread-safe: the code under test reads it while the test advances it.
//
// A wait does not sleep: it moves the clock by its whole duration at once and returns,
// unless its token is cancelled, which is checked before and after `on_wait` runs (a
// test cancels "during" a wait from there). Every wait begun is recorded, so a test
// reads the backoff schedule from waits().
class FakeClock final : public util::Clock {
 public:
  // Starts at the real time, so that log lines and uptime read sensibly.
  FakeClock() : now_(absl::Now()) {}
  explicit FakeClock(absl::Time start) : now_(start) {}

  absl::Time Now() const override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration by) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    now_ += by;
  }

  bool WaitFor(absl::Duration duration, const util::CancelToken* cancel) const override
      ABSL_LOCKS_EXCLUDED(mu_) {
    if (cancel != nullptr && cancel->cancelled()) return false;
    std::function<void(absl::Duration)> on_wait;
    {
      absl::MutexLock lock(&mu_);
      waits_.push_back(duration);
      on_wait = on_wait_;
    }
    if (on_wait) on_wait(duration);
    if (cancel != nullptr && cancel->cancelled()) return false;
    absl::MutexLock lock(&mu_);
    now_ += duration;
    return true;
  }

  // Runs at the start of every wait (after it was recorded), on the waiting thread.
  void set_on_wait(std::function<void(absl::Duration)> on_wait) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    on_wait_ = std::move(on_wait);
  }
  // The waits begun so far, in order (cancelled ones included).
  std::vector<absl::Duration> waits() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return waits_;
  }

 private:
  mutable absl::Mutex mu_;
  mutable absl::Time now_ ABSL_GUARDED_BY(mu_);
  mutable std::vector<absl::Duration> waits_ ABSL_GUARDED_BY(mu_);
  std::function<void(absl::Duration)> on_wait_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardcast::util_testing

#endif  // SHARDCAST_TESTS_SUPPORT_FAKE_CLOCK_H_
