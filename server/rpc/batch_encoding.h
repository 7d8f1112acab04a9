// Wire encoding of an assembled batch without copying its pixels: a ByteBuffer of
// two slices, [Batch fields + the `images` tag and length] and the image buffer
// itself, which gRPC releases when the transport is done with it (the idea of
// TensorFlow's grpc_tensor_coding.cc); a batch without images is its header alone.
// The receiver parses a plain Batch message.
#ifndef SHARDCAST_SERVER_RPC_BATCH_ENCODING_H_
#define SHARDCAST_SERVER_RPC_BATCH_ENCODING_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <memory>

#include "server/assembly/batch_assembler.h"

namespace shardcast::server {

// Encodes `batch` into `out`; the image slice keeps `batch` alive. Returns the
// message size in bytes. `server_draining` sets Batch.server_draining (the header is
// shared by every stream of the batch, so the flag is added here, not to it).
// REQUIRES: batch->header().images() is empty.
int64_t EncodeBatch(std::shared_ptr<const AssembledBatch> batch, grpc::ByteBuffer* out,
                    bool server_draining = false);

}  // namespace shardcast::server

#endif  // SHARDCAST_SERVER_RPC_BATCH_ENCODING_H_
