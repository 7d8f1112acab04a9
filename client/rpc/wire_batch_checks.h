// CheckBatch (client/checks/stream_checks.h) of a batch as received: its header and
// the image bytes that came in gRPC's slices.
#ifndef SHARDCAST_CLIENT_RPC_WIRE_BATCH_CHECKS_H_
#define SHARDCAST_CLIENT_RPC_WIRE_BATCH_CHECKS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "client/checks/stream_checks.h"
#include "client/rpc/wire_batch.h"
#include "shardcast/v1/shardcast.pb.h"

namespace shardcast::client {

inline absl::Status CheckBatch(const WireBatch& batch,
                               const shardcast::v1::RegisterResponse& registration,
                               const StreamPosition& at, int64_t epoch_batches) {
  return CheckBatch(batch.header(), batch.image_bytes(), registration, at, epoch_batches);
}

}  // namespace shardcast::client

#endif  // SHARDCAST_CLIENT_RPC_WIRE_BATCH_CHECKS_H_
