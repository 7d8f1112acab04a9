// The status page's memory: a bounded ring of samples of the server's cumulative
// counters (images served, seconds streams waited for the server and for the client),
// taken every few seconds on the injected clock, from which the page's charts get
// images/s and the share of waiting that was for the server (input-bound) over the last
// minutes. GetStatus itself knows only the totals and one recent rate, so the history
// is kept here, beside the page, and not in the reply.
#ifndef SHARDCAST_SERVER_STATUS_STATUS_HISTORY_H_
#define SHARDCAST_SERVER_STATUS_STATUS_HISTORY_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/base/clock.h"
#include "shardcast/v1/shardcast.pb.h"

namespace shardcast::server {

// One point of the charts: what happened between two consecutive samples.
struct ChartPoint {
  double seconds_ago = 0;        // the later sample's age when the points were read
  double images_per_second = 0;  // served in the interval
  // Of all the seconds streams waited in the interval, the share that clients waited for
  // the server (a batch not assembled yet: input-bound), 0..1; negative when no stream
  // waited at all (nothing streamed), which the chart leaves as a gap.
  double server_wait_share = -1;
};

// Thread-safe: the metrics listener's thread samples it and renders the page from it.
class StatusHistory {
 public:
  static constexpr absl::Duration kDefaultInterval = absl::Seconds(5);
  static constexpr absl::Duration kDefaultSpan = absl::Minutes(10);

  // REQUIRES: `clock` outlives the history; interval > 0; span >= interval.
  explicit StatusHistory(const Clock* clock, absl::Duration interval = kDefaultInterval,
                         absl::Duration span = kDefaultSpan);

  // Takes a sample of `status`'s counters unless the last one is younger than the
  // interval (so a page reloaded in a loop does not crowd the ring out).
  void Record(const shardcast::v1::GetStatusResponse& status) ABSL_LOCKS_EXCLUDED(mu_);

  // The charts' points, oldest first: one per pair of consecutive samples.
  std::vector<ChartPoint> Points() const ABSL_LOCKS_EXCLUDED(mu_);

  absl::Duration span() const { return span_; }

 private:
  struct Sample {
    absl::Time at;
    int64_t images_served = 0;
    double waited_for_server_seconds = 0;  // stream_wait_for_batch_seconds
    double waited_for_client_seconds = 0;  // stream_wait_for_client_seconds
  };

  const Clock* const clock_;
  const absl::Duration interval_;
  const absl::Duration span_;
  const size_t capacity_;  // samples that cover the span
  mutable absl::Mutex mu_;
  std::deque<Sample> samples_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_STATUS_STATUS_HISTORY_H_
