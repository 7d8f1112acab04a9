// Shared machinery of the pack modes: an ordered parallel producer (threads make
// samples, one thread writes them in index order), output-dir handling, a
// portable seeded shuffle. Internal to tools/pack.
#ifndef SHARDCAST_TOOLS_PACK_PACK_PIPELINE_H_
#define SHARDCAST_TOOLS_PACK_PACK_PIPELINE_H_

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "common/util/splitmix64.h"
#include "tools/pack/tar_writer.h"

namespace shardcast::pack {

using ::shardcast::SplitMix64;  // common/util/splitmix64.h

// A seeded permutation of 0..n-1 (Fisher-Yates), identical on every platform.
std::vector<int64_t> SeededPermutation(int64_t n, uint64_t seed);

// Threads to use for `requested` (0 = hardware concurrency), at least 1.
int ResolveThreads(int requested);

// Validates the sharding limits (per_shard, max_shard_bytes >= 0).
absl::Status CheckShardLimits(int64_t per_shard, int64_t max_shard_bytes);

// Creates `out_dir` (and parents) and removes what an earlier run left there:
// shard-*.tar, shard-*.tar.tmp, info.json. Nothing else is touched.
absl::Status PrepareOutputDir(const std::string& out_dir);

// Closes `writer` and writes info.json; fills `summary` from the writer.
absl::Status FinishDataset(const std::string& out_dir, ShardWriter& writer, int num_classes,
                           const std::vector<std::string>& class_names, PackSummary& summary);

// Calls produce(i) for i in [0, n) on `threads` threads and consume(i, value)
// on the calling thread in increasing i, with at most `window` values made but
// not yet consumed (bounded memory). Stops early and returns the first error
// of consume. produce must be thread-safe.
template <typename T>
absl::Status RunOrdered(int64_t n, int threads, int window,
                        const std::function<T(int64_t)>& produce,
                        const std::function<absl::Status(int64_t, T&)>& consume) {
  window = std::max(window, 1);
  threads = std::max(threads, 1);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::optional<T>> slots(static_cast<size_t>(window));
  int64_t next = 0;      // next index to produce (guarded by mu)
  int64_t consumed = 0;  // indices below this are consumed (guarded by mu)
  bool stop = false;     // guarded by mu

  auto worker = [&] {
    for (;;) {
      int64_t i;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stop || next >= n || next < consumed + window; });
        if (stop || next >= n) return;
        i = next++;
      }
      T value = produce(i);
      {
        std::lock_guard<std::mutex> lock(mu);
        slots[static_cast<size_t>(i % window)].emplace(std::move(value));
      }
      cv.notify_all();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker);

  absl::Status status;
  for (int64_t i = 0; i < n && status.ok(); ++i) {
    std::optional<T> value;
    {
      std::unique_lock<std::mutex> lock(mu);
      auto& slot = slots[static_cast<size_t>(i % window)];
      cv.wait(lock, [&] { return slot.has_value(); });
      value.swap(slot);
      consumed = i + 1;
    }
    cv.notify_all();
    status = consume(i, *value);
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
  }
  cv.notify_all();
  for (auto& t : pool) t.join();
  return status;
}

}  // namespace shardcast::pack

#endif  // SHARDCAST_TOOLS_PACK_PACK_PIPELINE_H_
