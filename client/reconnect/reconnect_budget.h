// ReconnectBudget: how long RankStream's prefetch loop may go on reconnecting after a
// stream broke or stalled, and the error it gives up with. It joins the two clocks of
// stream_clocks.h: the reconnect deadline of a run of failed attempts (RetryClock) and
// the stream timeout's second period after a stall (StallClock). Pure: the caller
// passes the time.
#ifndef SHARDCAST_CLIENT_RECONNECT_RECONNECT_BUDGET_H_
#define SHARDCAST_CLIENT_RECONNECT_RECONNECT_BUDGET_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/base/stream_clocks.h"
#include "client/base/stream_settings.h"
#include "client/checks/stream_checks.h"

namespace shardcast::client {

class ReconnectBudget {
 public:
  explicit ReconnectBudget(const StreamSettings& settings);

  // A batch arrived: a run of failures and a stall before it are over.
  void BatchArrived();
  // Until when reconnecting may go on (a re-registration's deadline); InfiniteFuture
  // while nothing failed.
  absl::Time GiveUp() const;
  // When the batch awaited from `now` is overdue (the read watchdog's deadline):
  // InfiniteFuture without a stream timeout; after a stall, no later than GiveUp().
  absl::Time ReadDeadline(absl::Time now) const;
  // An attempt failed at `now` with `error`; `stalled`: the watchdog cut it. Returns the
  // error to give up with once the time is over (`at`: where the stream of `n` batches
  // stands), OK while reconnecting may go on.
  absl::Status Failed(absl::Time now, const absl::Status& error, bool stalled,
                      const StreamPosition& at, int64_t n);
  // How long to wait before the next attempt (never past GiveUp()); the next doubles.
  absl::Duration TakeBackoff(absl::Time now);

 private:
  const std::string server_;
  const double stream_timeout_seconds_;
  const double reconnect_deadline_seconds_;
  RetryClock retry_;
  StallClock stall_;
};

}  // namespace shardcast::client

#endif  // SHARDCAST_CLIENT_RECONNECT_RECONNECT_BUDGET_H_
