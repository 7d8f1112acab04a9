// The two clocks of RankStream's prefetch loop, each a small value class so that the
// loop reads as what it does: RetryClock (how long a run of failed attempts is
// retried, and how long to wait before the next) and StallClock (the stream timeout:
// when a batch is overdue, and how long reconnecting after a stall may go on).
// Pure: the caller passes the time.
#ifndef SHARDCAST_CLIENT_BASE_STREAM_CLOCKS_H_
#define SHARDCAST_CLIENT_BASE_STREAM_CLOCKS_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/time/time.h"

namespace shardcast::client {

// A run of failed attempts, from the first failure after a batch arrived: retried
// until `deadline` after that first failure, with a backoff that starts at
// `initial_backoff` and doubles up to `max_backoff`.
class RetryClock {
 public:
  RetryClock(absl::Duration initial_backoff, absl::Duration max_backoff, absl::Duration deadline)
      : initial_(initial_backoff),
        max_(max_backoff),
        deadline_(deadline),
        backoff_(initial_backoff) {}

  // A batch arrived: the run of failures, if any, is over.
  void Reset() {
    failing_since_.reset();
    backoff_ = initial_;
    attempts_ = 0;
  }
  // An attempt failed at `now` with `error` (kept for the message that gives up).
  void Failed(absl::Time now, std::string error) {
    if (!failing_since_) failing_since_ = now;
    last_error_ = std::move(error);
    ++attempts_;
  }
  // Until when the current run is retried; InfiniteFuture outside a run.
  absl::Time GiveUp() const {
    return failing_since_ ? *failing_since_ + deadline_ : absl::InfiniteFuture();
  }
  // How long to wait before the next attempt (never past `give_up`); the wait after
  // it doubles.
  absl::Duration TakeBackoff(absl::Time now, absl::Time give_up) {
    const absl::Duration wait = std::min(backoff_, give_up - now);
    backoff_ = std::min(backoff_ * 2, max_);
    return wait;
  }
  int64_t attempts() const { return attempts_; }
  const std::string& last_error() const { return last_error_; }

 private:
  const absl::Duration initial_;
  const absl::Duration max_;
  const absl::Duration deadline_;
  absl::Duration backoff_;
  std::optional<absl::Time> failing_since_;
  int64_t attempts_ = 0;
  std::string last_error_;
};

// The stream timeout (`timeout`, zero = none): a batch is overdue `timeout` after the
// request or the last batch. Once the watchdog cut a stream that delivered nothing
// since the last batch, reconnecting gets one more `timeout` to bring a batch.
class StallClock {
 public:
  explicit StallClock(absl::Duration timeout) : timeout_(timeout) {}

  // A batch arrived: a stall before it is over.
  void BatchArrived() { since_.reset(); }
  // The watchdog cut a stream at `now`. Only the first cut since the last batch starts
  // the clock: later ones, and other failures while reconnecting, do not restart it.
  void Cut(absl::Time now) {
    if (!since_) since_ = now;
  }
  bool stalled() const { return since_.has_value(); }
  // Until when reconnecting after a stall may go on; InfiniteFuture when not stalled.
  absl::Time GiveUp() const { return since_ ? *since_ + timeout_ : absl::InfiniteFuture(); }
  // When the batch awaited from `now` is overdue: InfiniteFuture without a timeout;
  // while stalled, no later than `give_up` (the earlier of both clocks' GiveUp).
  absl::Time ReadDeadline(absl::Time now, absl::Time give_up) const {
    if (timeout_ <= absl::ZeroDuration()) return absl::InfiniteFuture();
    const absl::Time deadline = now + timeout_;
    return since_ ? std::min(deadline, give_up) : deadline;
  }

 private:
  const absl::Duration timeout_;
  std::optional<absl::Time> since_;
};

}  // namespace shardcast::client

#endif  // SHARDCAST_CLIENT_BASE_STREAM_CLOCKS_H_
