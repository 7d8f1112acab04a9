// First-come-first-served admission of bytes against a limit (see memory_budget.h).
#include "common/memory/memory_budget.h"

#include <algorithm>
#include <mutex>
#include <utility>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "absl/strings/str_cat.h"

namespace shardcast {

absl::StatusOr<MemoryGrant> MemoryGrant::Acquire(MemoryAdmission* admission, int64_t bytes) {
  bytes = std::max<int64_t>(bytes, 0);
  if (absl::Status s = admission->Acquire(bytes); !s.ok()) return s;
  return MemoryGrant(admission, bytes);
}

MemoryGrant::MemoryGrant(MemoryGrant&& other) noexcept
    : admission_(std::exchange(other.admission_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

MemoryGrant& MemoryGrant::operator=(MemoryGrant&& other) noexcept {
  if (this != &other) {
    Reset();
    admission_ = std::exchange(other.admission_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void MemoryGrant::Reset() {
  if (admission_ != nullptr) std::exchange(admission_, nullptr)->Release(bytes_);
  bytes_ = 0;
}

void PinMallocMmapThreshold() {
#ifdef __GLIBC__
  static std::once_flag pinned;
  std::call_once(pinned, [] { mallopt(M_MMAP_THRESHOLD, static_cast<int>(kPinnedMmapThreshold)); });
#endif
}

MemoryBudget::MemoryBudget(Options options) : options_(std::move(options)) {}

absl::Status MemoryBudget::Acquire(int64_t bytes) {
  bytes = std::max<int64_t>(bytes, 0);
  absl::MutexLock lock(&mu_);
  if (bytes > options_.limit) return Refuse(bytes);
  struct Turn {
    MemoryBudget* budget;
    uint64_t ticket;
    int64_t bytes;
  } turn{this, next_ticket_++, bytes};
  const auto admissible = [](Turn* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->budget->mu_) {
    return t->budget->next_admitted_ == t->ticket &&
           t->budget->in_use_ + t->bytes <= t->budget->options_.limit;
  };
  if (!admissible(&turn)) {
    ++waited_;
    mu_.Await(absl::Condition(+admissible, &turn));
  }
  ++next_admitted_;
  Take(bytes);
  return absl::OkStatus();
}

void MemoryBudget::Release(int64_t bytes) {
  {
    absl::MutexLock lock(&mu_);
    in_use_ -= std::max<int64_t>(bytes, 0);
  }
  if (options_.on_release) options_.on_release();
}

absl::StatusOr<MemoryGrant> MemoryBudget::Grant(int64_t bytes) {
  return MemoryGrant::Acquire(this, bytes);
}

std::optional<MemoryGrant> MemoryBudget::TryGrant(int64_t bytes, int64_t headroom) {
  bytes = std::max<int64_t>(bytes, 0);
  absl::MutexLock lock(&mu_);
  // Nobody waiting: a try must not overtake a waiter (first come, first served).
  if (next_ticket_ != next_admitted_ || in_use_ + bytes + headroom > options_.limit) {
    return std::nullopt;
  }
  Take(bytes);
  return MemoryGrant(this, bytes);
}

absl::Status MemoryBudget::CheckFits(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  return bytes > options_.limit ? Refuse(bytes) : absl::OkStatus();
}

absl::Status MemoryBudget::Refuse(int64_t bytes) {
  ++refused_;
  return absl::ResourceExhaustedError(
      options_.refusal ? options_.refusal(bytes)
                       : absl::StrCat(bytes, " bytes asked for, more than the whole limit of ",
                                      options_.limit, " bytes"));
}

void MemoryBudget::Take(int64_t bytes) {
  in_use_ += bytes;
  peak_in_use_ = std::max(peak_in_use_, in_use_);
}

int64_t MemoryBudget::in_use() const {
  absl::MutexLock lock(&mu_);
  return in_use_;
}

int64_t MemoryBudget::peak_in_use() const {
  absl::MutexLock lock(&mu_);
  return peak_in_use_;
}

int64_t MemoryBudget::refused() const {
  absl::MutexLock lock(&mu_);
  return refused_;
}

int64_t MemoryBudget::waited() const {
  absl::MutexLock lock(&mu_);
  return waited_;
}

}  // namespace shardcast
