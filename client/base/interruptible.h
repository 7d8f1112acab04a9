// Waits a binding can interrupt: the InterruptCheck a caller passes to RankStream's
// Connect and Next, and RunInterruptibly, which runs blocking work on a thread of its
// own so that the calling thread can keep asking it.
#ifndef SHARDCAST_CLIENT_BASE_INTERRUPTIBLE_H_
#define SHARDCAST_CLIENT_BASE_INTERRUPTIBLE_H_

#include <functional>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace shardcast::client {

// Asked, on the waiting thread, every kInterruptPollInterval while Connect or Next waits
// for the server; true ends the wait and the call returns CANCELLED, having consumed
// nothing. A binding checks for Ctrl-C in it: Python runs signal handlers only on its
// main thread, the one that waits, and only when asked (PyErr_CheckSignals).
using InterruptCheck = std::function<bool()>;
inline constexpr absl::Duration kInterruptPollInterval = absl::Milliseconds(50);

// Runs `work` and returns its status. With an `interrupted` check, `work` runs on a
// thread of its own while this one asks the check every kInterruptPollInterval; the
// first true calls `stop` (which must make `work` return soon), and once `work`
// returned, `interrupted_error` is the outcome. Without one, `work` runs here.
absl::Status RunInterruptibly(const std::function<absl::Status()>& work,
                              const InterruptCheck& interrupted, const std::function<void()>& stop,
                              const absl::Status& interrupted_error);

}  // namespace shardcast::client

#endif  // SHARDCAST_CLIENT_BASE_INTERRUPTIBLE_H_
