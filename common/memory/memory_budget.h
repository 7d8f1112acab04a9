// Bytes held against a fixed limit by many threads: the one admission of memory. The
// server's decode memory (--max-decode-memory), its batch memory (--max-batch-memory)
// and a client's decode memory (max_decode_memory) are each a MemoryBudget.
#ifndef SHARDCAST_COMMON_MEMORY_MEMORY_BUDGET_H_
#define SHARDCAST_COMMON_MEMORY_MEMORY_BUDGET_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace shardcast {

// What holds memory asks for it here first: the seam between a user of memory (an
// image decode: common/image's DecodeAdmission is this) and the budget, so a test can
// put a fake in between. MemoryBudget is the one real implementation.
class MemoryAdmission {
 public:
  virtual ~MemoryAdmission() = default;
  // OK: `bytes` are held until Release(bytes). An error means nothing is held; the
  // caller must not allocate. May block until the bytes are free.
  virtual absl::Status Acquire(int64_t bytes) = 0;
  virtual void Release(int64_t bytes) = 0;
};

// Bytes acquired from a MemoryAdmission, given back when the grant is destroyed, reset
// or assigned over: every path out of a scope gives them back. Move-only; an empty grant
// (default-constructed or moved from) holds nothing.
class MemoryGrant {
 public:
  // Acquires `bytes` (negative: 0) from `admission`, waiting as it waits; its error as
  // it is. REQUIRES: `admission` outlives the grant.
  static absl::StatusOr<MemoryGrant> Acquire(MemoryAdmission* admission, int64_t bytes);

  MemoryGrant() = default;
  MemoryGrant(MemoryGrant&& other) noexcept;
  MemoryGrant& operator=(MemoryGrant&& other) noexcept;
  MemoryGrant(const MemoryGrant&) = delete;
  MemoryGrant& operator=(const MemoryGrant&) = delete;
  ~MemoryGrant() { Reset(); }

  // Gives the bytes back now; the grant is then empty.
  void Reset();
  int64_t bytes() const { return bytes_; }
  bool empty() const { return admission_ == nullptr; }

 private:
  friend class MemoryBudget;
  // Takes over `bytes` already acquired from `admission`.
  MemoryGrant(MemoryAdmission* admission, int64_t bytes) : admission_(admission), bytes_(bytes) {}

  MemoryAdmission* admission_ = nullptr;  // not owned; null: empty
  int64_t bytes_ = 0;
};

// Thread-safe. Bytes in use never pass the limit. What can never fit (more than the
// whole limit) is refused at once, RESOURCE_EXHAUSTED; what can fit waits for holders to
// give bytes back. Waiting is first come, first served: a large request waiting for
// its bytes is not overtaken by smaller ones (a blocking Acquire or a TryGrant), so it
// cannot starve. A waiter relies on the holders giving their bytes back without
// waiting on it: the decode threads hold bytes only while they decode.
class MemoryBudget final : public MemoryAdmission {
 public:
  struct Options {
    int64_t limit = 0;  // REQUIRES: > 0
    // The refusal's message for `bytes` over the whole limit: what needed them and the
    // setting that would let them in. Unset: a plain sentence in bytes.
    std::function<std::string(int64_t bytes)> refusal;
    // When set, runs after every release with no lock of the budget held (the server's
    // stream admission waits on it); it may run under a lock of whoever releases.
    std::function<void()> on_release;
  };

  explicit MemoryBudget(Options options);
  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  // Waits until `bytes` (negative: 0) fit beside the bytes in use and every earlier
  // waiter was admitted; refuses them at once, counted in refused(), when they alone
  // are over the limit. Prefer Grant(), whose grant gives them back.
  absl::Status Acquire(int64_t bytes) override ABSL_LOCKS_EXCLUDED(mu_);
  void Release(int64_t bytes) override ABSL_LOCKS_EXCLUDED(mu_);

  // Acquire() held by a grant.
  absl::StatusOr<MemoryGrant> Grant(int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  // Without waiting: a grant of `bytes` when they fit now with `headroom` bytes to spare
  // beside them and nobody is waiting; nullopt (not counted) otherwise.
  std::optional<MemoryGrant> TryGrant(int64_t bytes, int64_t headroom = 0) ABSL_LOCKS_EXCLUDED(mu_);
  // Acquire's refusal alone, acquiring nothing: RESOURCE_EXHAUSTED (counted in
  // refused()) when `bytes` alone are over the limit, else OK.
  absl::Status CheckFits(int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);

  // Figures for the status reply.
  int64_t limit() const { return options_.limit; }
  int64_t in_use() const ABSL_LOCKS_EXCLUDED(mu_);
  // The most bytes ever in use at once: never above limit().
  int64_t peak_in_use() const ABSL_LOCKS_EXCLUDED(mu_);
  // Requests refused because they alone need more than the limit.
  int64_t refused() const ABSL_LOCKS_EXCLUDED(mu_);
  // Acquisitions that had to wait for others to give bytes back.
  int64_t waited() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // The refusal of `bytes` (> limit), counted.
  absl::Status Refuse(int64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Holds `bytes` more. REQUIRES: they fit.
  void Take(int64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  int64_t in_use_ ABSL_GUARDED_BY(mu_) = 0;       // bytes acquired and not yet released
  int64_t peak_in_use_ ABSL_GUARDED_BY(mu_) = 0;  // high-water mark of in_use_
  int64_t refused_ ABSL_GUARDED_BY(mu_) = 0;      // over the whole limit
  int64_t waited_ ABSL_GUARDED_BY(mu_) = 0;       // acquisitions that waited
  // First come, first served by ticket: a waiter is admitted only when its ticket is
  // next_admitted_; next_ticket_ == next_admitted_ when nobody waits.
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_admitted_ ABSL_GUARDED_BY(mu_) = 0;
};

// glibc raises its mmap threshold to the largest block freed so far (up to 32 MiB); after
// that, freed decode buffers stay resident in the arena of the thread that freed them,
// outside any budget (1,024 client decode threads held 321 MiB of such freed buffers
// beside a 64 MiB max_decode_memory). Pinned at kPinnedMmapThreshold, every larger block
// is a mapping of its own, unmapped when freed; smaller ones keep the arenas' fast path.
// The price: a page fault per page of every larger block, each time (1600x1600 JPEGs
// decoded 17-20 % slower on one thread), so only the client's decoder pins it, where
// thousands of threads may share one bound; the server's few decode threads keep
// glibc's default. Process-wide, idempotent and thread-safe; a no-op without glibc.
inline constexpr int64_t kPinnedMmapThreshold = int64_t{1} << 20;
void PinMallocMmapThreshold();

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_MEMORY_MEMORY_BUDGET_H_
