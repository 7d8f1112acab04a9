// WireBatch: the header parsed, the pixels kept in gRPC's slices (see wire_batch.h).
#include "client/rpc/wire_batch.h"

#include <grpcpp/impl/codegen/proto_utils.h>  // serializes the StreamBatchesRequest

#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "client/decode/receive_memory.h"

namespace shardcast::client {
namespace {

// Batch.images: the one field not copied out of the received slices.
constexpr uint64_t kImagesField = shardcast::v1::Batch::kImagesFieldNumber;

// Reads a message spread over slices, front to back. Every read checks what is left,
// so a truncated or hostile message ends in an error, never a read past the end.
class SliceCursor {
 public:
  explicit SliceCursor(const std::vector<grpc::Slice>& slices) : slices_(slices) {
    for (const grpc::Slice& s : slices_) left_ += s.size();
    SkipEmpty();
  }

  uint64_t left() const { return left_; }

  // One byte, appended to `copy` when given.
  bool ReadByte(uint8_t* byte, std::string* copy) {
    if (left_ == 0) return false;
    *byte = slices_[slice_].begin()[offset_];
    if (copy != nullptr) copy->push_back(static_cast<char>(*byte));
    Advance(1);
    return true;
  }

  // A base-128 varint of at most 10 bytes, appended to `copy` as read.
  bool ReadVarint(uint64_t* value, std::string* copy) {
    *value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t byte;
      if (!ReadByte(&byte, copy)) return false;
      *value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  }

  // The next `n` bytes (n <= left()): appended to `copy`, or as views to `views`.
  void Take(uint64_t n, std::string* copy, std::vector<absl::Span<const uint8_t>>* views) {
    while (n > 0) {
      const grpc::Slice& s = slices_[slice_];
      const size_t piece = std::min<uint64_t>(n, s.size() - offset_);
      const uint8_t* data = s.begin() + offset_;
      if (copy != nullptr) copy->append(reinterpret_cast<const char*>(data), piece);
      if (views != nullptr) views->emplace_back(data, piece);
      Advance(piece);
      n -= piece;
    }
  }

 private:
  void Advance(size_t n) {
    offset_ += n;
    left_ -= n;
    SkipEmpty();
  }
  void SkipEmpty() {
    while (slice_ < slices_.size() && offset_ == slices_[slice_].size()) {
      ++slice_;
      offset_ = 0;
    }
  }

  const std::vector<grpc::Slice>& slices_;
  size_t slice_ = 0;
  size_t offset_ = 0;
  uint64_t left_ = 0;
};

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed Batch message: ", what));
}

}  // namespace

absl::Status WireBatch::Parse(std::vector<grpc::Slice> slices, WireBatch* out) {
  out->slices_ = std::move(slices);
  out->chunks_.clear();
  out->image_bytes_ = 0;
  SliceCursor in(out->slices_);
  // The header fields are copied as they are (tag and value) into `header`, then
  // parsed by protobuf; only `images` is kept as views.
  std::string header;
  while (in.left() > 0) {
    const size_t field_start = header.size();
    uint64_t tag;
    if (!in.ReadVarint(&tag, &header)) return Malformed("truncated field tag");
    const uint64_t field = tag >> 3, wire_type = tag & 7;
    if (field == 0) return Malformed("field number 0");
    uint64_t value;
    switch (wire_type) {
      case 0:  // varint
        if (!in.ReadVarint(&value, &header)) return Malformed("truncated varint");
        break;
      case 1:  // fixed64
      case 5:  // fixed32
        value = wire_type == 1 ? 8 : 4;
        if (in.left() < value) return Malformed("truncated fixed-size field");
        in.Take(value, &header, nullptr);
        break;
      case 2: {  // length-delimited
        const bool images = field == kImagesField;
        if (images) header.resize(field_start);  // its tag is not a header field
        if (!in.ReadVarint(&value, images ? nullptr : &header)) {
          return Malformed("truncated length");
        }
        if (value > in.left()) {
          return Malformed(
              absl::StrFormat("field %d claims %d bytes, %d left", field, value, in.left()));
        }
        if (images) {  // a repeated occurrence replaces the earlier one, as in protobuf
          out->chunks_.clear();
          out->image_bytes_ = static_cast<int64_t>(value);
          in.Take(value, nullptr, &out->chunks_);
        } else {
          in.Take(value, &header, nullptr);
        }
        break;
      }
      default:
        return Malformed(absl::StrFormat("field %d has wire type %d", field, wire_type));
    }
  }
  if (!out->header_.ParseFromString(header)) return Malformed("header fields do not parse");
  return absl::OkStatus();
}

void WireBatch::CopyImagesTo(uint8_t* out) const {
  for (absl::Span<const uint8_t> chunk : chunks_) {
    std::memcpy(out, chunk.data(), chunk.size());
    out += chunk.size();
  }
}

void WireBatch::JoinImages() {
  if (chunks_.size() <= 1) return;
  grpc::Slice joined(static_cast<size_t>(image_bytes_));
  CopyImagesTo(const_cast<uint8_t*>(joined.begin()));
  chunks_ = {absl::Span<const uint8_t>(joined.begin(), joined.size())};
  slices_.clear();
  slices_.push_back(std::move(joined));
}

void WireBatch::SetImages(grpc::Slice pixels) {
  image_bytes_ = static_cast<int64_t>(pixels.size());
  chunks_ = {absl::Span<const uint8_t>(pixels.begin(), pixels.size())};
  slices_.clear();  // the header holds a copy of everything else
  slices_.push_back(std::move(pixels));
}

std::string WireBatch::ImagesToString() const {
  std::string images(static_cast<size_t>(image_bytes_), '\0');
  CopyImagesTo(reinterpret_cast<uint8_t*>(images.data()));
  return images;
}

WireBatchStub::WireBatchStub(std::shared_ptr<grpc::Channel> channel)
    : channel_(std::move(channel)),
      method_("/shardcast.v1.Shardcast/StreamBatches", grpc::internal::RpcMethod::SERVER_STREAMING,
              channel_) {
  // Batches arrive in buffers gRPC mallocs; keep them warm from one batch to the next.
  KeepReceiveBuffersWarm();
}

std::unique_ptr<grpc::ClientReader<WireBatch>> WireBatchStub::StreamBatches(
    grpc::ClientContext* context, const shardcast::v1::StreamBatchesRequest& request) const {
  // ClientReaderFactory is what generated stubs call (grpcpp/support/sync_stream.h).
  return std::unique_ptr<grpc::ClientReader<WireBatch>>(
      grpc::internal::ClientReaderFactory<WireBatch>::Create(channel_.get(), method_, context,
                                                             request));
}

}  // namespace shardcast::client

namespace grpc {

Status SerializationTraits<shardcast::client::WireBatch, void>::Deserialize(
    ByteBuffer* buffer, shardcast::client::WireBatch* msg) {
  std::vector<Slice> slices;
  Status dumped = buffer->Dump(&slices);
  buffer->Clear();  // as protobuf's Deserialize does: the buffer is consumed
  if (!dumped.ok()) return dumped;
  absl::Status parsed = shardcast::client::WireBatch::Parse(std::move(slices), msg);
  msg->parse_error_ = parsed;
  if (!parsed.ok()) return Status(StatusCode::INTERNAL, std::string(parsed.message()));
  return Status::OK;
}

}  // namespace grpc
