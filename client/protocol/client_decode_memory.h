// A client's bound on the memory its image decodes take (encoded delivery): what the
// server's --max-decode-memory is to its decode pool, for the threads of one client.
#ifndef SHARDCAST_CLIENT_PROTOCOL_CLIENT_DECODE_MEMORY_H_
#define SHARDCAST_CLIENT_PROTOCOL_CLIENT_DECODE_MEMORY_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/image/image_transform.h"

namespace shardcast::client {

// The decode buffers of every thread together held within `limit` bytes, admitted from
// each image's header before its buffers are allocated (DecodeWithCrop asks). An image
// over the whole limit is refused at once, RESOURCE_EXHAUSTED naming `limit_name` (what
// the user set: "max_decode_memory"); one that fits waits for others to give bytes back
// (they are decoding, never waiting, so they do). Thread-safe.
class ClientDecodeMemory final : public DecodeAdmission {
 public:
  // REQUIRES: limit > 0.
  ClientDecodeMemory(int64_t limit, std::string limit_name);

  absl::Status Acquire(int64_t bytes) override;
  void Release(int64_t bytes) override;

 private:
  const int64_t limit_;
  const std::string limit_name_;
  absl::Mutex mu_;
  int64_t in_use_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shardcast::client

#endif  // SHARDCAST_CLIENT_PROTOCOL_CLIENT_DECODE_MEMORY_H_
