// ReadWatchdog: a thread that calls `cancel` once the message a reader waits for is
// overdue. RankStream's prefetch thread reads with gRPC's sync Read(), which cannot be
// given a deadline of its own (and a call deadline would also cut a healthy long
// epoch), so it arms this before each read and disarms it after; a stalled server's
// stream is then cancelled and the reader sees it (TakeStalled) as a stall, not a break.
#ifndef SHARDCAST_CLIENT_BASE_READ_WATCHDOG_H_
#define SHARDCAST_CLIENT_BASE_READ_WATCHDOG_H_

#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/util/clock.h"

namespace shardcast::client {

class ReadWatchdog {
 public:
  // `cancel` runs on the watchdog's thread with the watchdog's lock held, so that an Arm()
  // racing it is either before (the read was overdue) or after (the next read is
  // watched): it must not call back into this object. Deadlines are times of `clock`
  // (not owned), which the watchdog's thread reads and waits on.
  explicit ReadWatchdog(std::function<void()> cancel,
                        const util::Clock* clock = util::Clock::Real())
      : cancel_(std::move(cancel)), clock_(clock) {}
  ~ReadWatchdog() { Stop(); }
  ReadWatchdog(const ReadWatchdog&) = delete;
  ReadWatchdog& operator=(const ReadWatchdog&) = delete;

  // Starts the thread, disarmed. After Stop() it may be started again.
  void Start();
  // The message awaited now must arrive by `deadline`; InfiniteFuture disarms (e.g. while
  // the reader waits for its consumer, which is not the server's time).
  void Arm(absl::Time deadline);
  // Whether `cancel` ran since the last call.
  bool TakeStalled();
  // Ends the thread without waiting for it (from the reader's own thread, once it has
  // nothing more to read); Stop() joins it.
  void Quit();
  // Ends and joins the thread, and forgets the deadline and a stall not taken.
  void Stop();

 private:
  void Run();

  const std::function<void()> cancel_;
  const util::Clock* const clock_;
  std::thread thread_;
  // Ends the thread's wait early: cancelled when the deadline moves before the one it
  // waits for, and on Quit; armed again by the thread before each wait.
  util::CancelToken wake_;
  absl::Mutex mu_;
  absl::Time deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  // The deadline the thread waits for now (a later one moved in is seen when it passes).
  absl::Time waiting_for_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool stalled_ ABSL_GUARDED_BY(mu_) = false;
  bool quit_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace shardcast::client

#endif  // SHARDCAST_CLIENT_BASE_READ_WATCHDOG_H_
