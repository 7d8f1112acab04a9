// A job's epochs read with the generated stub and nothing else: the floor that a
// client's receive path is measured against (stream_consumer_bench, train_input_bench).
// The header is plain C++, so benchmarks compiled against LibTorch use it without the
// generated protobuf code (cmake/TorchProtobufSeparation.cmake says why).
#ifndef SHARDCAST_BENCH_RAW_STREAM_READER_H_
#define SHARDCAST_BENCH_RAW_STREAM_READER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace grpc {
class ChannelCredentials;
}  // namespace grpc

namespace shardcast::bench {

// Rank 0 of a one-rank job, split sample, center transform.
struct RawStreamJob {
  std::string server;
  std::shared_ptr<grpc::ChannelCredentials> credentials;  // nullptr = plaintext
  std::string bearer_token;
  std::string job_id;
  int batch = 32;
  int resize = 72;
  int crop = 64;
};

enum class RawRead {
  kParse,  // each Batch parsed into a message (pixels copied into a string)
  kWire,   // read as WireBatch: header parsed, pixels left in gRPC's receive slices
};

// A batch's pixels, [B,3,C,C] uint8, writable (kParse only).
using RawBatchCallback = std::function<void(uint8_t* pixels, const std::vector<int64_t>& shape)>;

class RawStreamReader {
 public:
  // Registers the job, retrying for up to a minute while the server is unavailable.
  static absl::StatusOr<std::unique_ptr<RawStreamReader>> Register(const RawStreamJob& job);
  ~RawStreamReader();

  // Streams epochs [0, epochs) and returns the images received. `on_batch` (may be
  // empty) sees each batch's pixels when `mode` is kParse.
  absl::StatusOr<int64_t> ReadEpochs(int epochs, RawRead mode, const RawBatchCallback& on_batch);

 private:
  class Impl;
  explicit RawStreamReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardcast::bench

#endif  // SHARDCAST_BENCH_RAW_STREAM_READER_H_
