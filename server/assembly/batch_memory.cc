// Batch memory budget and per-stream shares (see batch_memory.h).
#include "server/assembly/batch_memory.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/flags/flags.h"

namespace shardcast::server {

MemoryBudget::Options BatchMemoryOptions(int64_t limit_bytes, std::function<void()> on_release) {
  MemoryBudget::Options options;
  options.limit = limit_bytes;
  options.refusal = [limit_bytes](int64_t bytes) {
    return absl::StrCat("batch memory: one batch of this job takes ", FormatFlagSize(bytes),
                        ", more than the server's whole --max-batch-memory ",
                        FormatFlagSize(limit_bytes),
                        "; lower the batch size or crop, ask for fewer or smaller fields, or "
                        "raise --max-batch-memory");
  };
  options.on_release = std::move(on_release);
  return options;
}

BatchGrant& BatchGrant::operator=(BatchGrant&& other) noexcept {
  if (this != &other) {
    BatchGrant old(std::move(*this));  // released at the end of this scope
    owner_ = std::move(other.owner_);
    guaranteed_ = other.guaranteed_;
    extra_ = std::move(other.extra_);
  }
  return *this;
}

BatchGrant::~BatchGrant() {
  // An extra batch's bytes go back with extra_.
  if (owner_ != nullptr && guaranteed_) owner_->ReleaseGuaranteed();
}

absl::StatusOr<std::shared_ptr<StreamMemory>> StreamMemory::Create(MemoryBudget* budget,
                                                                   int64_t batch_bytes) {
  std::optional<MemoryGrant> guaranteed = budget->TryGrant(batch_bytes);
  if (!guaranteed.has_value()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "batch memory: this stream needs ", FormatFlagSize(batch_bytes), " for one batch and ",
        FormatFlagSize(std::max<int64_t>(0, budget->limit() - budget->in_use())), " of the ",
        FormatFlagSize(budget->limit()),
        " budget is free (other streams hold the rest); retry later, raise the server's "
        "--max-batch-memory, lower the batch size or crop, or run fewer concurrent streams"));
  }
  return std::shared_ptr<StreamMemory>(
      new StreamMemory(budget, batch_bytes, *std::move(guaranteed)));
}

void StreamMemory::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
  on_freed_ = nullptr;
  if (!guaranteed_in_use_) guaranteed_.Reset();
}

bool StreamMemory::TryAcquire(int64_t bytes, BatchGrant* grant) {
  std::optional<MemoryGrant> extra;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return false;
    if (!guaranteed_in_use_) {
      guaranteed_in_use_ = true;
      wake_on_release_ = false;
    } else {
      // Headroom of one batch: an extra batch never takes the room a new stream's
      // guaranteed batch (of this stream's size) would need.
      extra = budget_->TryGrant(bytes, /*headroom=*/batch_bytes_);
      if (!extra.has_value()) {
        wake_on_release_ = true;
        return false;
      }
      wake_on_release_ = false;
    }
  }
  *grant = extra.has_value()
               ? BatchGrant(shared_from_this(), /*guaranteed=*/false, *std::move(extra))
               : BatchGrant(shared_from_this(), /*guaranteed=*/true, MemoryGrant());
  return true;
}

void StreamMemory::SetOnFreed(std::function<void()> on_freed) {
  absl::MutexLock lock(&mu_);
  on_freed_ = std::move(on_freed);
}

void StreamMemory::ReleaseGuaranteed() {
  std::function<void()> wake;
  {
    absl::MutexLock lock(&mu_);
    guaranteed_in_use_ = false;
    if (closed_) guaranteed_.Reset();
    if (wake_on_release_) wake = on_freed_;
    wake_on_release_ = false;
  }
  if (wake) wake();
}

}  // namespace shardcast::server
