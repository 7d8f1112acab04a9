// Server-wide counters for GetStatus and /metrics: images and bytes served (with a
// recent rate), decode errors, substitutions, the memory held in batch buffers, the
// decode-time histogram and who waits on whom.
#ifndef SHARDCAST_SERVER_BASE_SERVER_STATS_H_
#define SHARDCAST_SERVER_BASE_SERVER_STATS_H_

#include <array>
#include <atomic>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace shardcast::server {

// Events per second over the last few seconds, from one-second buckets.
class RateMeter {
 public:
  static constexpr int kWindowSeconds = 10;
  explicit RateMeter(absl::Time start) : start_(start) {}

  void Add(int64_t images, int64_t bytes, absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  // Rates over the last kWindowSeconds complete seconds plus the current one
  // (or since start, when the server is younger than that).
  void Rates(absl::Time now, double* images_per_second, double* bytes_per_second) const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Bucket {
    int64_t second = -1;  // seconds since start_ this bucket holds
    int64_t images = 0;
    int64_t bytes = 0;
  };
  const absl::Time start_;
  mutable absl::Mutex mu_;
  std::array<Bucket, kWindowSeconds + 1> buckets_ ABSL_GUARDED_BY(mu_);  // ring by second
};

// A cumulative histogram of durations with fixed bucket bounds, as Prometheus keeps
// them: lock-free to observe from every decode thread at once.
class DurationHistogram {
 public:
  // Upper bounds in seconds, ascending (the +Inf bucket is implied). Decoding one
  // image takes from tens of microseconds (a thumbnail) to tens of milliseconds (a
  // full-size photo); the last bounds catch a slow disk.
  static constexpr std::array<double, 12> kBounds = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                     0.01,   0.025,   0.05,   0.1,   0.5,    2.5};
  struct Snapshot {
    std::array<int64_t, kBounds.size() + 1> counts{};  // per bucket (not cumulative); last = +Inf
    int64_t count = 0;
    double sum_seconds = 0;
  };

  void Observe(absl::Duration duration);
  Snapshot Read() const;

 private:
  std::array<std::atomic<int64_t>, kBounds.size() + 1> counts_{};
  std::atomic<int64_t> sum_nanos_{0};
};

struct ServerStats {
  explicit ServerStats(absl::Time start) : start_time(start), rate(start) {}

  const absl::Time start_time;
  RateMeter rate;                         // images/bytes actually written to streams
  std::atomic<int64_t> images_served{0};  // valid + padding entries in sent batches
  std::atomic<int64_t> bytes_served{0};   // Batch message bytes handed to gRPC
  std::atomic<int64_t> decode_errors{0};  // read or decode failures
  std::atomic<int64_t> substitutions{0};  // substitutes sent (one per failure)
  // Shard reads the host failed (HostIoError) and that were tried again.
  std::atomic<int64_t> shard_read_retries{0};
  std::atomic<int64_t> buffer_bytes{0};  // bytes held in live batch buffers
  // Of the decode errors: image members over --max-member-bytes (not read).
  std::atomic<int64_t> images_over_member_limit{0};
  // Of the decode errors: images in a format shardcast does not decode (GIF, BMP, TIFF,
  // animated WebP...; IsUnsupportedImageFormat).
  std::atomic<int64_t> images_unsupported_format{0};
  // Resource governance (see batch_memory.h, stream_control.h).
  std::atomic<int64_t> streams_refused_memory{0};  // not even one batch fit the budget
  std::atomic<int64_t> streams_replaced{0};        // a newer stream of the same rank came
  std::atomic<int64_t> streams_reclaimed_idle{0};  // client took nothing for the timeout
  std::atomic<int64_t> batches_given_back{0};      // prefetched batches dropped under pressure
  DurationHistogram decode_time;                   // read + decode + transform of one sample
  // Connections (accept_watch.h, listener_probe.h).
  std::atomic<int64_t> connections_open{0};     // as of the last accept or count
  std::atomic<int64_t> connections_refused{0};  // beyond --max-connections
  std::atomic<bool> listener_accepting{true};   // the last listener probes' verdict
  // Who is the bottleneck, summed over streams (nanoseconds): a stream waiting for its
  // next batch to be assembled, and a batch handed to gRPC waiting for the client.
  std::atomic<int64_t> wait_for_batch_nanos{0};
  std::atomic<int64_t> wait_for_client_nanos{0};
};

// Resident set size of this process, from /proc/self/statm (0 when unavailable).
int64_t ResidentSetBytes();

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_BASE_SERVER_STATS_H_
