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
#include "common/memory/memory_budget.h"

namespace shardcast::server {

// The budget of `limit_bytes` (> 0) for batch buffers: a MemoryBudget whose refusal of
// a stream whose one batch alone is over it names --max-batch-memory, and whose
// `on_release` (see MemoryBudget::Options) runs after every release.
MemoryBudget::Options BatchMemoryOptions(int64_t limit_bytes, std::function<void()> on_release);

class StreamMemory;

// One batch's reservation, held by its AssembledBatch and given back when the batch
// (and with it the buffer) dies. Move-only; an empty grant reserves nothing.
class BatchGrant {
 public:
  BatchGrant() = default;
  BatchGrant(BatchGrant&& other) noexcept = default;
  BatchGrant& operator=(BatchGrant&& other) noexcept;
  ~BatchGrant();

 private:
  friend class StreamMemory;
  // `extra`: what an extra batch reserved (the guaranteed one's are the stream's).
  BatchGrant(std::shared_ptr<StreamMemory> owner, bool guaranteed, MemoryGrant extra)
      : owner_(std::move(owner)), guaranteed_(guaranteed), extra_(std::move(extra)) {}

  std::shared_ptr<StreamMemory> owner_;
  bool guaranteed_ = false;
  MemoryGrant extra_;  // an extra batch's own bytes; empty for the guaranteed one
};

// One stream's share: its guaranteed batch, reserved for the stream's life, and
// extra batches borrowed from the budget one at a time. Thread-safe. Lives as long as
// the stream's window or any batch it granted (gRPC may still hold a sent batch).
class StreamMemory : public std::enable_shared_from_this<StreamMemory> {
 public:
  // RESOURCE_EXHAUSTED when the budget cannot hold even one batch of `batch_bytes`
  // more; the message says what to change. REQUIRES: `budget` outlives the result.
  static absl::StatusOr<std::shared_ptr<StreamMemory>> Create(MemoryBudget* budget,
                                                              int64_t batch_bytes);

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
  StreamMemory(MemoryBudget* budget, int64_t batch_bytes, MemoryGrant guaranteed)
      : budget_(budget), batch_bytes_(batch_bytes), guaranteed_(std::move(guaranteed)) {}
  // The guaranteed batch's grant died.
  void ReleaseGuaranteed() ABSL_LOCKS_EXCLUDED(mu_);

  MemoryBudget* const budget_;
  const int64_t batch_bytes_;
  mutable absl::Mutex mu_;
  // The guaranteed batch's bytes of the budget, reserved for the stream's life; empty
  // once given back (closed, and no batch holds it). Its destruction gives them back.
  MemoryGrant guaranteed_ ABSL_GUARDED_BY(mu_);
  bool guaranteed_in_use_ ABSL_GUARDED_BY(mu_) = false;  // a live batch holds it
  bool wake_on_release_ ABSL_GUARDED_BY(mu_) = false;    // a TryAcquire failed since
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> on_freed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_ASSEMBLY_BATCH_MEMORY_H_
