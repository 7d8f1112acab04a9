// WireBatch: a received Batch message whose image bytes stay in gRPC's receive buffer.
// A batch is ~5 MB of pixels behind a few hundred bytes of header; parsing it as a
// v1::Batch copies every pixel into a std::string first. Here only the header fields
// are parsed (into a v1::Batch whose `images` stays empty) and the pixels are kept as
// the slices they arrived in: the consumer copies them once, to where they are needed
// (pinned memory for the GPU, or straight into normalized floats), or aliases them when
// gRPC delivered them in one piece.
//
// The stream reads WireBatch directly: grpc::SerializationTraits<WireBatch> below
// makes it a message type gRPC's ClientReader can deserialize into.
#ifndef SHARDCAST_CLIENT_RPC_WIRE_BATCH_H_
#define SHARDCAST_CLIENT_RPC_WIRE_BATCH_H_

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>
#include <grpcpp/support/status.h>
#include <grpcpp/support/sync_stream.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "shardcast/v1/shardcast.pb.h"

namespace shardcast::client {

class WireBatch {
 public:
  // Every field of the message but `images`, which is left empty.
  const shardcast::v1::Batch& header() const { return header_; }
  int64_t epoch() const { return header_.epoch(); }
  int64_t index() const { return header_.index(); }

  // The `images` bytes: image_bytes() in all, as the pieces gRPC received them in
  // (in order; views into buffers this object keeps alive).
  int64_t image_bytes() const { return image_bytes_; }
  const std::vector<absl::Span<const uint8_t>>& image_chunks() const { return chunks_; }
  // Copies the image_bytes() bytes to `out`.
  void CopyImagesTo(uint8_t* out) const;
  // Copies the pixels into one block this object owns, when they came in several pieces,
  // and lets go of the received buffers: image_chunks() is then one chunk.
  void JoinImages();
  // Encoded delivery decoded here (encoded_batch_decoder.h): the decoded pixels take the
  // place of the (empty) images, and the header marks the samples substituted here.
  shardcast::v1::Batch* mutable_header() { return &header_; }
  void SetImages(grpc::Slice pixels);
  // The image bytes as one string (a copy: tests and small consumers).
  std::string ImagesToString() const;

  // Parses a serialized v1::Batch given as the slices of a received buffer. Errors
  // (truncated or malformed message) are INVALID_ARGUMENT naming what was wrong.
  static absl::Status Parse(std::vector<grpc::Slice> slices, WireBatch* out);

  // Why the last message gRPC read into this object did not parse (OK if it did or none
  // was read): a failed parse ends the sync Read() with false, as the stream's end does.
  const absl::Status& parse_error() const { return parse_error_; }

 private:
  friend class grpc::SerializationTraits<WireBatch, void>;

  shardcast::v1::Batch header_;
  std::vector<grpc::Slice> slices_;  // own the bytes chunks_ point into
  std::vector<absl::Span<const uint8_t>> chunks_;
  int64_t image_bytes_ = 0;
  absl::Status parse_error_;
};

// StreamBatches with its messages read as WireBatch: what the generated stub's
// StreamBatches does, with the message type that keeps the pixels where they arrived.
class WireBatchStub {
 public:
  explicit WireBatchStub(std::shared_ptr<grpc::Channel> channel);
  std::unique_ptr<grpc::ClientReader<WireBatch>> StreamBatches(
      grpc::ClientContext* context, const shardcast::v1::StreamBatchesRequest& request) const;

 private:
  std::shared_ptr<grpc::Channel> channel_;
  grpc::internal::RpcMethod method_;
};

}  // namespace shardcast::client

namespace grpc {

// Deserialization only: the client never sends a WireBatch.
template <>
class SerializationTraits<shardcast::client::WireBatch, void> {
 public:
  static Status Serialize(const shardcast::client::WireBatch&, ByteBuffer*, bool*) {
    return Status(StatusCode::UNIMPLEMENTED, "a WireBatch is only received");
  }
  static Status Deserialize(ByteBuffer* buffer, shardcast::client::WireBatch* msg);
};

}  // namespace grpc

#endif  // SHARDCAST_CLIENT_RPC_WIRE_BATCH_H_
