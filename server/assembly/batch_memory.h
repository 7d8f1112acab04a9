// The server's budget for batch buffers (--max-batch-memory) and each stream's share
// of it. Every batch buffer is created only after its bytes were reserved here, so the
// reserved total bounds what batch buffers can hold, whatever the clients do.
//
// Admission: a stream reserves one batch for its whole life when it opens (its
// guaranteed batch, of the most bytes one of its batches can take; if even that does
// not fit, the stream is refused). Each further batch of its window (prefetch) is an
// extra reservation of that batch's own bytes (pixels and the members it carries),
// granted per batch, only while one more guaranteed batch would still fit afterwards,
// so that a newly arriving stream can still be admitted; extras go back to the budget as soon as
// the batch is sent and freed. Under pressure the service also makes windows give their prefetched
// batches back (BatchWindow::Shrink) and reclaims idle streams.
#ifndef SHARDCAST_SERVER_ASSEMBLY_BATCH_MEMORY_H_
#define SHARDCAST_SERVER_ASSEMBLY_BATCH_MEMORY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace shardcast::server {

// Thread-safe counter of reserved bytes under a fixed limit.
class BatchMemoryBudget {
 public:
  // `on_release`, when set, runs after every Release with no lock of the budget held
  // (the admission queue waits on it); it may run under a StreamMemory's lock.
  explicit BatchMemoryBudget(int64_t limit_bytes, std::function<void()> on_release = nullptr)
      : limit_(limit_bytes), on_release_(std::move(on_release)) {}
  BatchMemoryBudget(const BatchMemoryBudget&) = delete;
  BatchMemoryBudget& operator=(const BatchMemoryBudget&) = delete;

  // Reserves `bytes` when reserved() + bytes + headroom <= limit(); false otherwise.
  bool TryReserve(int64_t bytes, int64_t headroom = 0) ABSL_LOCKS_EXCLUDED(mu_);
  void Release(int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);

  int64_t limit() const { return limit_; }
  int64_t reserved() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t peak_reserved() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const int64_t limit_;
  const std::function<void()> on_release_;
  mutable absl::Mutex mu_;
  int64_t reserved_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_ ABSL_GUARDED_BY(mu_) = 0;
};

class StreamMemory;

// One batch's reservation, held by its AssembledBatch and given back when the batch
// (and with it the buffer) dies. Move-only; an empty grant reserves nothing.
class BatchGrant {
 public:
  BatchGrant() = default;
  // `bytes`: what an extra grant reserved (the guaranteed one's are the stream's).
  BatchGrant(std::shared_ptr<StreamMemory> owner, bool guaranteed, int64_t bytes)
      : owner_(std::move(owner)), guaranteed_(guaranteed), bytes_(bytes) {}
  BatchGrant(BatchGrant&& other) noexcept = default;
  BatchGrant& operator=(BatchGrant&& other) noexcept;
  ~BatchGrant();

 private:
  std::shared_ptr<StreamMemory> owner_;
  bool guaranteed_ = false;
  int64_t bytes_ = 0;
};

// One stream's share: its guaranteed batch, reserved for the stream's life, and
// extra batches borrowed from the budget one at a time. Thread-safe. Lives as long as
// the stream's window or any batch it granted (gRPC may still hold a sent batch).
class StreamMemory : public std::enable_shared_from_this<StreamMemory> {
 public:
  // RESOURCE_EXHAUSTED when the budget cannot hold even one batch of `batch_bytes`
  // more; the message says what to change.
  static absl::StatusOr<std::shared_ptr<StreamMemory>> Create(BatchMemoryBudget* budget,
                                                              int64_t batch_bytes);
  ~StreamMemory();  // gives the guaranteed batch back

  // A reservation for one more batch of `bytes` (at most batch_bytes()): the
  // guaranteed one when no live batch holds it, else an extra one of `bytes` when the
  // budget allows. Empty when neither: then `on_freed` (see SetOnFreed) runs once the
  // guaranteed batch is given back.
  bool TryAcquire(int64_t bytes, BatchGrant* grant) ABSL_LOCKS_EXCLUDED(mu_);

  // Called, without any lock held here, when the guaranteed batch is given back after
  // a TryAcquire failed; the window uses it to launch again. Set once, before use.
  void SetOnFreed(std::function<void()> on_freed) ABSL_LOCKS_EXCLUDED(mu_);

  // The stream ended: the guaranteed batch goes back to the budget as soon as no batch
  // holds it (now, or when the batch gRPC still holds dies), not when the last
  // reference to this object goes, so a replacing stream can be admitted at once.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);

  int64_t batch_bytes() const { return batch_bytes_; }

 private:
  friend class BatchGrant;
  StreamMemory(BatchMemoryBudget* budget, int64_t batch_bytes)
      : budget_(budget), batch_bytes_(batch_bytes) {}
  // `bytes`: an extra grant's.
  void Release(bool guaranteed, int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);

  BatchMemoryBudget* const budget_;
  const int64_t batch_bytes_;
  mutable absl::Mutex mu_;
  bool guaranteed_in_use_ ABSL_GUARDED_BY(mu_) = false;
  bool wake_on_release_ ABSL_GUARDED_BY(mu_) = false;  // a TryAcquire failed since
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool guaranteed_returned_ ABSL_GUARDED_BY(mu_) = false;  // given back to the budget
  std::function<void()> on_freed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_ASSEMBLY_BATCH_MEMORY_H_
