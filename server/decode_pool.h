// The decode thread pool shared by every stream: a FIFO of small tasks (one per
// sample) run by a fixed set of threads.
#ifndef SHARDCAST_SERVER_DECODE_POOL_H_
#define SHARDCAST_SERVER_DECODE_POOL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace shardcast::server {

class DecodePool {
 public:
  // Starts `threads` workers (0 = hardware concurrency, at least 1).
  explicit DecodePool(int threads);
  // Stops the workers; tasks still queued are destroyed without running (their
  // owners hold what they need through shared pointers and skip-flags).
  ~DecodePool();
  DecodePool(const DecodePool&) = delete;
  DecodePool& operator=(const DecodePool&) = delete;

  // Queues `task`; it runs on a pool thread. Tasks must not block on other tasks.
  void Submit(std::function<void()> task) ABSL_LOCKS_EXCLUDED(mu_);

  int threads() const { return static_cast<int>(workers_.size()); }
  // Tasks waiting for a thread (not counting running ones).
  int64_t queue_depth() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void WorkerLoop() ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);  // FIFO of pending tasks
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;                    // set by the destructor
  std::vector<std::thread> workers_;                              // fixed after construction
};

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_DECODE_POOL_H_
