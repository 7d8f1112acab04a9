// First-come-first-served admission of decode bytes (see decode_budget.h).
#include "server/assembly/decode_budget.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/flags/flags.h"

namespace shardcast::server {

DecodeBudget::DecodeBudget(int64_t limit_bytes) : limit_(limit_bytes) {}

absl::Status DecodeBudget::Acquire(int64_t bytes) {
  bytes = std::max<int64_t>(bytes, 0);
  absl::MutexLock lock(&mu_);
  if (bytes > limit_) return Refuse(bytes);
  const uint64_t ticket = next_ticket_++;
  struct Turn {
    DecodeBudget* budget;
    uint64_t ticket;
    int64_t bytes;
  } turn{this, ticket, bytes};
  const auto admissible = [](Turn* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->budget->mu_) {
    return t->budget->next_admitted_ == t->ticket &&
           t->budget->in_use_ + t->bytes <= t->budget->limit_;
  };
  if (!admissible(&turn)) {
    ++waited_;
    mu_.Await(absl::Condition(+admissible, &turn));
  }
  ++next_admitted_;
  in_use_ += bytes;
  peak_in_use_ = std::max(peak_in_use_, in_use_);
  return absl::OkStatus();
}

absl::Status DecodeBudget::CheckFits(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  return bytes > limit_ ? Refuse(bytes) : absl::OkStatus();
}

absl::Status DecodeBudget::Refuse(int64_t bytes) {
  ++refused_;
  return absl::ResourceExhaustedError(absl::StrCat(
      "decoding needs ", FormatFlagSize(bytes), ", more than the whole decode budget (",
      "--max-decode-memory ", FormatFlagSize(limit_), ")"));
}

void DecodeBudget::Release(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  in_use_ -= std::max<int64_t>(bytes, 0);
}

int64_t DecodeBudget::in_use() const {
  absl::MutexLock lock(&mu_);
  return in_use_;
}

int64_t DecodeBudget::peak_in_use() const {
  absl::MutexLock lock(&mu_);
  return peak_in_use_;
}

int64_t DecodeBudget::refused() const {
  absl::MutexLock lock(&mu_);
  return refused_;
}

int64_t DecodeBudget::waited() const {
  absl::MutexLock lock(&mu_);
  return waited_;
}

}  // namespace shardcast::server
