// The decode thread pool shared by every stream: a FIFO of small tasks (one per
// sample) run by a fixed set of threads.
#ifndef SHARDCAST_SERVER_ASSEMBLY_DECODE_POOL_H_
#define SHARDCAST_SERVER_ASSEMBLY_DECODE_POOL_H_

#include <atomic>
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
  // A task should not throw; one that does (std::bad_alloc, say) is logged and counted
  // in task_exceptions(), and the worker goes on: it never terminates the process.
  void Submit(std::function<void()> task) ABSL_LOCKS_EXCLUDED(mu_);

  int threads() const { return static_cast<int>(workers_.size()); }
  // Tasks waiting for a thread (not counting running ones).
  int64_t queue_depth() const ABSL_LOCKS_EXCLUDED(mu_);
  // Tasks running on a pool thread now. With queue_depth() == 0 too, every task
  // submitted so far has finished (a task is counted running from the moment it leaves
  // the queue, under the same lock).
  int64_t running() const { return running_.load(std::memory_order_acquire); }
  // Tasks that ended with an exception (see Submit).
  int64_t task_exceptions() const { return task_exceptions_.load(std::memory_order_relaxed); }

 private:
  void WorkerLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // Runs one task; an exception is logged and counted instead of escaping the thread.
  void RunGuarded(std::function<void()>& task);

  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);  // FIFO of pending tasks
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;                    // set by the destructor
  std::vector<std::thread> workers_;                              // fixed after construction
  std::atomic<int64_t> task_exceptions_{0};                       // tasks that threw
  std::atomic<int64_t> running_{0};                               // tasks being run
};

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_ASSEMBLY_DECODE_POOL_H_
