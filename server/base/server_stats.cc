// Rate meter and RSS reading for GetStatus (see server_stats.h).
#include "server/base/server_stats.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace shardcast::server {

void RateMeter::Add(int64_t images, int64_t bytes, absl::Time now) {
  const int64_t second = absl::ToInt64Seconds(now - start_);
  absl::MutexLock lock(&mu_);
  Bucket& bucket = buckets_[second % buckets_.size()];
  if (bucket.second != second) bucket = Bucket{second, 0, 0};
  bucket.images += images;
  bucket.bytes += bytes;
}

void RateMeter::Rates(absl::Time now, double* images_per_second, double* bytes_per_second) const {
  const double age = absl::ToDoubleSeconds(now - start_);
  const int64_t current = static_cast<int64_t>(age);
  int64_t images = 0, bytes = 0;
  {
    absl::MutexLock lock(&mu_);
    for (const Bucket& bucket : buckets_) {
      if (bucket.second >= 0 && bucket.second > current - kWindowSeconds - 1 &&
          bucket.second <= current) {
        images += bucket.images;
        bytes += bucket.bytes;
      }
    }
  }
  // The window covers kWindowSeconds whole seconds plus the elapsed part of the
  // current one, or the whole life of the server when it is younger.
  const double span = std::max(1e-3, std::min(age, kWindowSeconds + (age - current)));
  *images_per_second = images / span;
  *bytes_per_second = bytes / span;
}

void DurationHistogram::Observe(absl::Duration duration) {
  const double seconds = absl::ToDoubleSeconds(duration);
  const size_t bucket = std::lower_bound(kBounds.begin(), kBounds.end(), seconds) - kBounds.begin();
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_nanos_.fetch_add(absl::ToInt64Nanoseconds(duration), std::memory_order_relaxed);
}

DurationHistogram::Snapshot DurationHistogram::Read() const {
  Snapshot snapshot;
  for (size_t i = 0; i < counts_.size(); ++i) {
    snapshot.counts[i] = counts_[i].load(std::memory_order_relaxed);
    snapshot.count += snapshot.counts[i];
  }
  snapshot.sum_seconds = static_cast<double>(sum_nanos_.load(std::memory_order_relaxed)) * 1e-9;
  return snapshot;
}

int64_t ResidentSetBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  long long size = 0, resident = 0;
  const int fields = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  if (fields != 2) return 0;
  return static_cast<int64_t>(resident) * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace shardcast::server
