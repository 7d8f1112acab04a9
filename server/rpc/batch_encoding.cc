// Zero-copy Batch encoding (see batch_encoding.h).
#include "server/rpc/batch_encoding.h"

#include <grpcpp/support/slice.h>

#include <string>

namespace shardcast::server {

namespace {
// Tag of Batch.images: field 15, wire type 2 (length-delimited).
constexpr uint8_t kImagesTag = (15 << 3) | 2;
// Batch.server_draining, field 6, varint.
constexpr uint8_t kServerDrainingTag = (6 << 3) | 0;

void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

void ReleaseBatch(void* holder) {
  delete static_cast<std::shared_ptr<const AssembledBatch>*>(holder);
}
}  // namespace

int64_t EncodeBatch(std::shared_ptr<const AssembledBatch> batch, grpc::ByteBuffer* out,
                    bool server_draining) {
  std::string prefix;
  batch->header().SerializeToString(&prefix);
  if (server_draining) {
    prefix.push_back(static_cast<char>(kServerDrainingTag));
    prefix.push_back(1);
  }
  if (batch->image_bytes() == 0) {
    // A batch without images (a members-only job): the header is the whole message.
    const int64_t size = static_cast<int64_t>(prefix.size());
    grpc::Slice header(prefix);
    *out = grpc::ByteBuffer(&header, 1);
    return size;
  }
  prefix.push_back(static_cast<char>(kImagesTag));
  AppendVarint(batch->image_bytes(), &prefix);
  const int64_t size = static_cast<int64_t>(prefix.size() + batch->image_bytes());
  // The slice's user data is a heap-held reference to the batch; gRPC calls
  // ReleaseBatch once it no longer needs the pixels.
  void* pixels = const_cast<uint8_t*>(batch->images());
  const size_t image_bytes = batch->image_bytes();
  auto* holder = new std::shared_ptr<const AssembledBatch>(std::move(batch));
  grpc::Slice slices[2] = {grpc::Slice(prefix),
                           grpc::Slice(pixels, image_bytes, &ReleaseBatch, holder)};
  *out = grpc::ByteBuffer(slices, 2);
  return size;
}

}  // namespace shardcast::server
