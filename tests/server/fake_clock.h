// A clock the test moves (server/base/clock.h): TTL, idle and stall rules are checked by
// advancing it past their limits instead of sleeping for them.
#ifndef SHARDCAST_TESTS_SERVER_FAKE_CLOCK_H_
#define SHARDCAST_TESTS_SERVER_FAKE_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/base/clock.h"

namespace shardcast::server_testing {

// Thread-safe: the server's threads read it while the test advances it.
class FakeClock final : public server::Clock {
 public:
  // Starts at the real time, so that log lines and uptime read sensibly.
  FakeClock() : now_(absl::Now()) {}
  absl::Time Now() const override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration by) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    now_ += by;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardcast::server_testing

#endif  // SHARDCAST_TESTS_SERVER_FAKE_CLOCK_H_
