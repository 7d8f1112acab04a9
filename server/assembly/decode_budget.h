// The server-wide decode memory budget: bytes of decode buffers in flight across all
// decode threads, admitted from each image's header before its buffers are allocated.
#ifndef SHARDCAST_SERVER_ASSEMBLY_DECODE_BUDGET_H_
#define SHARDCAST_SERVER_ASSEMBLY_DECODE_BUDGET_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/image/image_transform.h"

namespace shardcast::server {

// Thread-safe. Admission is first come, first served: a large image waiting for its
// bytes is not overtaken by smaller ones, so it cannot starve. Waiting is safe on a
// pool thread: the bytes in use belong to decodes that are running, never waiting,
// so they are always given back.
class DecodeBudget final : public DecodeAdmission {
 public:
  // REQUIRES: limit_bytes > 0.
  explicit DecodeBudget(int64_t limit_bytes);
  DecodeBudget(const DecodeBudget&) = delete;
  DecodeBudget& operator=(const DecodeBudget&) = delete;

  // Waits until `bytes` fit beside the bytes in use and every earlier caller was
  // admitted. RESOURCE_EXHAUSTED at once, without waiting, when `bytes` alone are
  // over the limit (the caller substitutes that image).
  absl::Status Acquire(int64_t bytes) override ABSL_LOCKS_EXCLUDED(mu_);
  void Release(int64_t bytes) override ABSL_LOCKS_EXCLUDED(mu_);
  // Acquire's refusal alone, acquiring nothing: RESOURCE_EXHAUSTED (counted in
  // refused()) when `bytes` alone are over the limit. For encoded delivery, which
  // substitutes the images server delivery would while the client decodes the rest.
  absl::Status CheckFits(int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);

  int64_t limit() const { return limit_; }
  int64_t in_use() const ABSL_LOCKS_EXCLUDED(mu_);
  // The most bytes ever in use at once: never above limit().
  int64_t peak_in_use() const ABSL_LOCKS_EXCLUDED(mu_);
  // Images refused because they alone need more than the limit.
  int64_t refused() const ABSL_LOCKS_EXCLUDED(mu_);
  // Admissions that had to wait for other decodes to give bytes back.
  int64_t waited() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // The refusal of `bytes` (> limit_), counted.
  absl::Status Refuse(int64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t limit_;
  mutable absl::Mutex mu_;
  int64_t in_use_ ABSL_GUARDED_BY(mu_) = 0;       // bytes admitted and not yet released
  int64_t peak_in_use_ ABSL_GUARDED_BY(mu_) = 0;  // high-water mark of in_use_
  int64_t refused_ ABSL_GUARDED_BY(mu_) = 0;      // over the whole limit
  int64_t waited_ ABSL_GUARDED_BY(mu_) = 0;       // admissions that waited
  // FIFO by ticket: a caller is admitted only when its ticket is next_admitted_.
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_admitted_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_ASSEMBLY_DECODE_BUDGET_H_
