// ClientDecodeMemory (see client_decode_memory.h).
#include "client/protocol/client_decode_memory.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/flags/flags.h"

namespace shardcast::client {

ClientDecodeMemory::ClientDecodeMemory(int64_t limit, std::string limit_name)
    : limit_(limit), limit_name_(std::move(limit_name)) {}

absl::Status ClientDecodeMemory::Acquire(int64_t bytes) {
  bytes = std::max<int64_t>(bytes, 0);
  if (bytes > limit_) {
    return absl::ResourceExhaustedError(absl::StrFormat("decoding needs %s, more than %s (%s)",
                                                        FormatFlagSize(bytes), limit_name_,
                                                        FormatFlagSize(limit_)));
  }
  struct Request {
    ClientDecodeMemory* memory;
    int64_t bytes;
  } request{this, bytes};
  const auto fits = [](Request* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->memory->mu_) {
    return r->memory->in_use_ + r->bytes <= r->memory->limit_;
  };
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(+fits, &request));
  in_use_ += bytes;
  return absl::OkStatus();
}

void ClientDecodeMemory::Release(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  in_use_ -= std::max<int64_t>(bytes, 0);
}

}  // namespace shardcast::client
