// ReadWatchdog (see read_watchdog.h).
#include "client/base/read_watchdog.h"

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
  if (deadline_ < waiting_for_) wake_.Cancel();
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
  wake_.Cancel();
}

void ReadWatchdog::Stop() {
  Quit();
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  deadline_ = absl::InfiniteFuture();
  waiting_for_ = absl::InfiniteFuture();
  stalled_ = false;
}

void ReadWatchdog::Run() {
  while (true) {
    absl::Duration wait;
    {
      absl::MutexLock lock(&mu_);
      if (quit_) return;
      const absl::Time now = clock_->Now();
      if (now >= deadline_) {
        stalled_ = true;
        deadline_ = absl::InfiniteFuture();
        cancel_();
        continue;
      }
      waiting_for_ = deadline_;
      wake_.Reset();
      wait = deadline_ - now;
    }
    // Disarmed, it waits for Arm or Quit alone: an event, not a time of the clock.
    if (wait == absl::InfiniteDuration()) {
      wake_.AwaitUntil(absl::InfiniteFuture());
    } else {
      clock_->WaitFor(wait, &wake_);
    }
  }
}

}  // namespace shardcast::client
