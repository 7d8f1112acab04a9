// ReadWatchdog (see read_watchdog.h).
#include "client/protocol/read_watchdog.h"

#include "absl/time/clock.h"

namespace shardcast::client {

void ReadWatchdog::Start() {
  Stop();
  {
    absl::MutexLock lock(&mu_);
    quit_ = false;
  }
  thread_ = std::thread([this] { Run(); });
}

void ReadWatchdog::Arm(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  deadline_ = deadline;
}

bool ReadWatchdog::TakeStalled() {
  absl::MutexLock lock(&mu_);
  const bool stalled = stalled_;
  stalled_ = false;
  return stalled;
}

void ReadWatchdog::Quit() {
  absl::MutexLock lock(&mu_);
  quit_ = true;
}

void ReadWatchdog::Stop() {
  Quit();
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  deadline_ = absl::InfiniteFuture();
  stalled_ = false;
}

void ReadWatchdog::Run() {
  absl::MutexLock lock(&mu_);
  while (!quit_) {
    const absl::Time deadline = deadline_;
    if (absl::Now() >= deadline) {
      stalled_ = true;
      deadline_ = absl::InfiniteFuture();
      cancel_();
      continue;
    }
    // Woken early only when the deadline moves closer (armed after being disarmed); a
    // deadline pushed later by a received message is seen when the old one passes.
    auto woken = [this, deadline]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return quit_ || deadline_ < deadline; };
    mu_.AwaitWithDeadline(absl::Condition(&woken), deadline);
  }
}

}  // namespace shardcast::client
