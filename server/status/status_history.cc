// The status page's samples (see status_history.h).
#include "server/status/status_history.h"

#include <algorithm>

namespace shardcast::server {

StatusHistory::StatusHistory(const Clock* clock, absl::Duration interval, absl::Duration span)
    : clock_(clock),
      interval_(interval),
      span_(span),
      // One sample more than intervals: N intervals need N + 1 ends.
      capacity_(static_cast<size_t>(span / interval) + 1) {}

void StatusHistory::Record(const shardcast::v1::GetStatusResponse& status) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  if (!samples_.empty() && now - samples_.back().at < interval_) return;
  samples_.push_back({now, status.images_served(), status.stream_wait_for_batch_seconds(),
                      status.stream_wait_for_client_seconds()});
  while (samples_.size() > capacity_) samples_.pop_front();
}

std::vector<ChartPoint> StatusHistory::Points() const {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  std::vector<ChartPoint> points;
  for (size_t i = 1; i < samples_.size(); ++i) {
    const Sample& before = samples_[i - 1];
    const Sample& after = samples_[i];
    const double seconds = absl::ToDoubleSeconds(after.at - before.at);
    if (seconds <= 0) continue;
    ChartPoint point;
    point.seconds_ago = absl::ToDoubleSeconds(now - after.at);
    // Counters only grow within a process; max() keeps a reset from drawing below zero.
    point.images_per_second =
        static_cast<double>(std::max<int64_t>(after.images_served - before.images_served, 0)) /
        seconds;
    const double for_server =
        std::max(after.waited_for_server_seconds - before.waited_for_server_seconds, 0.0);
    const double for_client =
        std::max(after.waited_for_client_seconds - before.waited_for_client_seconds, 0.0);
    if (for_server + for_client > 0)
      point.server_wait_share = for_server / (for_server + for_client);
    points.push_back(point);
  }
  return points;
}

}  // namespace shardcast::server
