// Fixed-size FIFO thread pool (see decode_pool.h).
#include "server/assembly/decode_pool.h"

#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/base/log.h"

namespace shardcast::server {

DecodePool::DecodePool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  if (threads <= 0) threads = 1;
  workers_.reserve(threads);
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

DecodePool::~DecodePool() {
  std::deque<std::function<void()>> dropped;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  for (auto& worker : workers_) worker.join();
  // `dropped` is destroyed here, outside the lock: task destructors may free batches.
}

void DecodePool::Submit(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(task));
}

int64_t DecodePool::queue_depth() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(queue_.size());
}

void DecodePool::RunGuarded(std::function<void()>& task) {
  // An exception leaving a std::thread's function calls std::terminate: one image
  // that could not be allocated would take every trainer's server down.
  try {
    task();
    return;
  } catch (const std::exception& e) {
    task_exceptions_.fetch_add(1, std::memory_order_relaxed);
    try {  // the log line allocates too; without memory it is dropped, the count stays
      LogError("pool", absl::StrCat("a decode task failed with an exception: ", e.what()));
    } catch (...) {
    }
  } catch (...) {
    task_exceptions_.fetch_add(1, std::memory_order_relaxed);
    try {
      LogError("pool", "a decode task failed with an exception of unknown type");
    } catch (...) {
    }
  }
}

void DecodePool::WorkerLoop() {
  for (;;) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](DecodePool* pool) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pool->mu_) {
            return pool->stopping_ || !pool->queue_.empty();
          },
          this));
      if (stopping_) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      running_.fetch_add(1, std::memory_order_acq_rel);
    }
    RunGuarded(task);
    task = nullptr;  // what the task held (a batch, say) goes before it counts as done
    running_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace shardcast::server
