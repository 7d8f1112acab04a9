// BoundedQueue: what a producer thread hands to one consumer, in order: items, each a
// value or an error (absl::StatusOr), at most `capacity` values waiting. The producer
// waits for space before it makes a value (so nothing is received that cannot be
// kept) and may always append an error; the consumer waits for an item, the
// producer's end, or Close(). Stop() wakes a producer waiting for space, Close() a
// consumer waiting for an item; Restart() empties the queue for the next producer.
// RankStream's prefetch thread and Next() use it; nothing in it knows of gRPC.
#ifndef SHARDCAST_CLIENT_BASE_BOUNDED_QUEUE_H_
#define SHARDCAST_CLIENT_BASE_BOUNDED_QUEUE_H_

#include <cstddef>
#include <deque>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace shardcast::client {

// T: default-constructible and movable.
template <typename T>
class BoundedQueue {
 public:
  // `capacity` >= 1: the most values waiting for the consumer.
  explicit BoundedQueue(size_t capacity) : capacity_(capacity) {}
  BoundedQueue(const BoundedQueue&) = delete;
  BoundedQueue& operator=(const BoundedQueue&) = delete;

  // --- The producer.
  // Waits until fewer than `capacity` items wait; false (at once) once stopped.
  bool WaitForSpace() {
    absl::MutexLock lock(&mu_);
    auto space = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopped_ || items_.size() < capacity_;
    };
    mu_.Await(absl::Condition(&space));
    return !stopped_;
  }
  // Appends without waiting: a value after WaitForSpace, or an error (always room for one).
  void Push(absl::StatusOr<T> item) {
    absl::MutexLock lock(&mu_);
    if (item.ok()) {
      items_.push_back(Item{*std::move(item), absl::OkStatus()});
    } else {
      items_.push_back(Item{T(), item.status()});
    }
  }
  // Nothing more will be pushed (all delivered, an error pushed, or stopped).
  void FinishProducing() {
    absl::MutexLock lock(&mu_);
    producer_done_ = true;
  }

  // --- The consumer.
  // Whether Pop() would return without waiting: an item waits, the producer finished,
  // or the queue is closed.
  bool Ready() const {
    absl::MutexLock lock(&mu_);
    return ReadyLocked();
  }
  // Waits up to `timeout` for Ready(); whether it holds.
  bool WaitReady(absl::Duration timeout) const {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(this, &BoundedQueue::ReadyLocked), timeout);
  }
  // The next item, waiting for it; std::nullopt once closed (even with items waiting), or
  // when the producer finished without another item.
  std::optional<absl::StatusOr<T>> Pop() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &BoundedQueue::ReadyLocked));
    if (closed_ || items_.empty()) return std::nullopt;
    Item item = std::move(items_.front());
    items_.pop_front();
    if (!item.error.ok()) return absl::StatusOr<T>(std::move(item.error));
    return absl::StatusOr<T>(std::move(item.value));
  }

  // --- Control, from any thread.
  // The producer must stop: a WaitForSpace now or later returns false.
  void Stop() {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
  }
  // For good: every Pop, now or later, returns std::nullopt; the producer is stopped too.
  void Close() {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    stopped_ = true;
  }
  bool closed() const {
    absl::MutexLock lock(&mu_);
    return closed_;
  }
  // Empties the queue for a new producer (the old one has exited); `finished`: none will
  // run (nothing is to come). A closed queue stays closed.
  void Restart(bool finished) {
    absl::MutexLock lock(&mu_);
    items_.clear();
    stopped_ = closed_;
    producer_done_ = finished;
  }

 private:
  bool ReadyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closed_ || !items_.empty() || producer_done_;
  }

  // A value, or (error not OK) an error: kept apart rather than as a StatusOr, whose
  // move out of a deque GCC warns about (-Wmaybe-uninitialized, a false positive).
  struct Item {
    T value;
    absl::Status error;
  };

  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::deque<Item> items_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // No producer runs or will push again (true before the first Restart).
  bool producer_done_ ABSL_GUARDED_BY(mu_) = true;
};

}  // namespace shardcast::client

#endif  // SHARDCAST_CLIENT_BASE_BOUNDED_QUEUE_H_
