// RunInterruptibly (see interruptible.h).
#include "client/base/interruptible.h"

#include <thread>

#include "absl/synchronization/notification.h"

namespace shardcast::client {

absl::Status RunInterruptibly(const std::function<absl::Status()>& work,
                              const InterruptCheck& interrupted, const std::function<void()>& stop,
                              const absl::Status& interrupted_error) {
  if (interrupted == nullptr) return work();
  absl::Status status;
  absl::Notification done;
  std::thread worker([&] {
    status = work();
    done.Notify();
  });
  bool stopped = false;
  while (!done.WaitForNotificationWithTimeout(kInterruptPollInterval)) {
    if (!stopped && interrupted()) {
      stopped = true;
      stop();
    }
  }
  worker.join();
  return stopped ? interrupted_error : status;
}

}  // namespace shardcast::client
