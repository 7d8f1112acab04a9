// Ending a stream from outside its call (see stream_control.h).
#include "server/serving/stream_control.h"

#include <utility>

namespace shardcast::server {

std::optional<absl::Status> StreamControl::Attach(Ender ender) {
  absl::MutexLock lock(&mu_);
  if (end_status_.has_value()) return end_status_;
  ender_ = std::move(ender);
  return std::nullopt;
}

void StreamControl::Detach() {
  absl::MutexLock lock(&mu_);
  // An End running the ender still uses the reactor: wait for it.
  mu_.Await(absl::Condition(
      +[](bool* ending) { return !*ending; }, &ending_));
  ender_ = nullptr;
}

bool StreamControl::End(const absl::Status& status) {
  if (ended_.exchange(true)) return false;
  Ender ender;
  {
    absl::MutexLock lock(&mu_);
    if (!ender_) {
      end_status_ = status;  // not attached yet (Attach reports it) or already gone
      return true;
    }
    ender = ender_;
    ending_ = true;
  }
  // Outside the lock: the ender calls into gRPC, which may run reactions inline.
  ender(status);
  absl::MutexLock lock(&mu_);
  ending_ = false;
  return true;
}

std::optional<absl::Duration> StreamControl::WriteWaiting(absl::Time now) const {
  const int64_t started = write_started_.load();
  if (started == 0) return std::nullopt;
  return now - absl::FromUnixNanos(started);
}

}  // namespace shardcast::server
