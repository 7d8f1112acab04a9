// ReconnectBudget (see reconnect_budget.h).
#include "client/reconnect/reconnect_budget.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace shardcast::client {

ReconnectBudget::ReconnectBudget(const StreamSettings& settings)
    : server_(settings.server),
      stream_timeout_seconds_(settings.stream_timeout_seconds),
      reconnect_deadline_seconds_(settings.reconnect_deadline_seconds),
      retry_(absl::Seconds(settings.reconnect_initial_seconds),
             absl::Seconds(settings.reconnect_max_seconds),
             absl::Seconds(settings.reconnect_deadline_seconds)),
      stall_(absl::Seconds(settings.stream_timeout_seconds)) {}

void ReconnectBudget::BatchArrived() {
  retry_.Reset();
  stall_.BatchArrived();
}

absl::Time ReconnectBudget::GiveUp() const { return std::min(retry_.GiveUp(), stall_.GiveUp()); }

absl::Time ReconnectBudget::ReadDeadline(absl::Time now) const {
  return stall_.ReadDeadline(now, GiveUp());
}

absl::Status ReconnectBudget::Failed(absl::Time now, const absl::Status& error, bool stalled,
                                     const StreamPosition& at, int64_t n) {
  if (stalled) stall_.Cut(now);
  retry_.Failed(now, absl::StrCat(absl::StatusCodeToString(error.code()), ": ", error.message()));
  if (now < GiveUp()) return absl::OkStatus();
  if (stall_.stalled()) {
    return absl::DeadlineExceededError(absl::StrFormat(
        "job '%s' rank %d epoch %d: no batch from server %s for %g s (the stream timeout) "
        "at batch %d of %d, and reconnecting brought none within another %g s (%d "
        "attempts); last error: %s",
        at.job_id, at.rank, at.epoch, server_, stream_timeout_seconds_, at.batch, n,
        stream_timeout_seconds_, retry_.attempts(), retry_.last_error()));
  }
  return absl::UnavailableError(absl::StrFormat(
      "job '%s' rank %d epoch %d: stream broken at batch %d of %d and server %s not back "
      "within %.1f s (%d attempts); last error: %s",
      at.job_id, at.rank, at.epoch, at.batch, n, server_, reconnect_deadline_seconds_,
      retry_.attempts(), retry_.last_error()));
}

absl::Duration ReconnectBudget::TakeBackoff(absl::Time now) {
  return retry_.TakeBackoff(now, GiveUp());
}

}  // namespace shardcast::client
