// Batch memory budget and per-stream shares (see batch_memory.h).
#include "server/assembly/batch_memory.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/flags/flags.h"

namespace shardcast::server {

bool BatchMemoryBudget::TryReserve(int64_t bytes, int64_t headroom) {
  absl::MutexLock lock(&mu_);
  if (reserved_ + bytes + headroom > limit_) return false;
  reserved_ += bytes;
  peak_ = std::max(peak_, reserved_);
  return true;
}

void BatchMemoryBudget::Release(int64_t bytes) {
  {
    absl::MutexLock lock(&mu_);
    reserved_ -= bytes;
  }
  if (on_release_) on_release_();
}

int64_t BatchMemoryBudget::reserved() const {
  absl::MutexLock lock(&mu_);
  return reserved_;
}

int64_t BatchMemoryBudget::peak_reserved() const {
  absl::MutexLock lock(&mu_);
  return peak_;
}

BatchGrant& BatchGrant::operator=(BatchGrant&& other) noexcept {
  if (this != &other) {
    BatchGrant old(std::move(*this));  // released at the end of this scope
    owner_ = std::move(other.owner_);
    guaranteed_ = other.guaranteed_;
    bytes_ = other.bytes_;
  }
  return *this;
}

BatchGrant::~BatchGrant() {
  if (owner_ != nullptr) owner_->Release(guaranteed_, bytes_);
}

absl::StatusOr<std::shared_ptr<StreamMemory>> StreamMemory::Create(BatchMemoryBudget* budget,
                                                                   int64_t batch_bytes) {
  if (!budget->TryReserve(batch_bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "batch memory: this stream needs ", FormatFlagSize(batch_bytes), " for one batch and ",
        FormatFlagSize(std::max<int64_t>(0, budget->limit() - budget->reserved())), " of the ",
        FormatFlagSize(budget->limit()),
        " budget is free (other streams hold the rest); retry later, raise the server's "
        "--max-batch-memory, lower the batch size or crop, or run fewer concurrent streams"));
  }
  return std::shared_ptr<StreamMemory>(new StreamMemory(budget, batch_bytes));
}

StreamMemory::~StreamMemory() {
  absl::MutexLock lock(&mu_);
  if (!guaranteed_returned_) budget_->Release(batch_bytes_);
}

void StreamMemory::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
  on_freed_ = nullptr;
  if (!guaranteed_in_use_ && !guaranteed_returned_) {
    guaranteed_returned_ = true;
    budget_->Release(batch_bytes_);
  }
}

bool StreamMemory::TryAcquire(int64_t bytes, BatchGrant* grant) {
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return false;
    if (!guaranteed_in_use_) {
      guaranteed_in_use_ = true;
      wake_on_release_ = false;
      *grant = BatchGrant(shared_from_this(), /*guaranteed=*/true, 0);
      return true;
    }
    // Headroom of one batch: an extra batch never takes the room a new stream's
    // guaranteed batch (of this stream's size) would need.
    if (!budget_->TryReserve(bytes, /*headroom=*/batch_bytes_)) {
      wake_on_release_ = true;
      return false;
    }
    wake_on_release_ = false;
  }
  *grant = BatchGrant(shared_from_this(), /*guaranteed=*/false, bytes);
  return true;
}

void StreamMemory::SetOnFreed(std::function<void()> on_freed) {
  absl::MutexLock lock(&mu_);
  on_freed_ = std::move(on_freed);
}

void StreamMemory::Release(bool guaranteed, int64_t bytes) {
  if (!guaranteed) {
    budget_->Release(bytes);
    return;
  }
  std::function<void()> wake;
  {
    absl::MutexLock lock(&mu_);
    guaranteed_in_use_ = false;
    if (closed_ && !guaranteed_returned_) {
      guaranteed_returned_ = true;
      budget_->Release(batch_bytes_);
    }
    if (wake_on_release_) wake = on_freed_;
    wake_on_release_ = false;
  }
  if (wake) wake();
}

}  // namespace shardcast::server
