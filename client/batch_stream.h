// BatchStream: one rank's view of a shardcast job — registers, streams an epoch's
// batches with prefetch on its own thread, reconnects and resumes on a broken stream,
// and hands batches out as torch tensors.
#ifndef SHARDCAST_CLIENT_BATCH_STREAM_H_
#define SHARDCAST_CLIENT_BATCH_STREAM_H_

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "shardcast/v1/shardcast.pb.h"

namespace shardcast {

struct BatchStreamOptions {
  std::string server;                  // "host:port"
  shardcast::v1::RegisterRequest job;  // job_id, rank, world_size, batch size, split, ...
  int prefetch = 4;                    // batches buffered ahead of the trainer
  // Reconnect with exponential backoff (initial..max) for at most this long before
  // giving up on a dead server.
  double reconnect_initial_seconds = 0.1;
  double reconnect_max_seconds = 2.0;
  double reconnect_deadline_seconds = 120.0;
  // Where the tensors go. For CUDA the host tensor is pinned and copied non_blocking.
  torch::Device device = torch::kCPU;
  // Normalization applied on `device`: (x/255 - mean) / std, per channel.
  std::vector<double> mean = {0.485, 0.456, 0.406};
  std::vector<double> std = {0.229, 0.224, 0.225};
};

struct SampleMeta {
  std::string key;
  int32_t shard = -1;
  int32_t index_in_shard = -1;
  bool valid = true;
  bool substituted = false;
};

struct TrainingBatch {
  int64_t epoch = 0;
  int64_t index = 0;
  torch::Tensor images_uint8;  // [B,3,C,C] uint8 on CPU, aliases the received message
  torch::Tensor images;        // [B,3,C,C] float32 normalized, on options.device
  torch::Tensor labels;        // [B] int64 on options.device (-1 for padding)
  torch::Tensor valid;         // [B] bool on options.device
  std::vector<SampleMeta> samples;
};

class BatchStream {
 public:
  // Registers the rank (retrying while the server is unreachable, up to the deadline).
  static absl::StatusOr<std::unique_ptr<BatchStream>> Connect(BatchStreamOptions options);
  ~BatchStream();  // stops the prefetch thread and cancels the open stream
  BatchStream(const BatchStream&) = delete;
  BatchStream& operator=(const BatchStream&) = delete;

  const shardcast::v1::RegisterResponse& registration() const;
  int64_t batches_per_epoch() const;

  // Starts streaming `epoch` from `start_batch` (cancels any stream in progress).
  absl::Status StartEpoch(int64_t epoch, int64_t start_batch = 0);

  // Next batch of the current epoch, or std::nullopt once batches_per_epoch() batches
  // have been handed out. An error means the server stayed unreachable past the
  // reconnect deadline or answered with a non-retryable status.
  absl::StatusOr<std::optional<TrainingBatch>> Next();

  // Reconnects made so far (for tests and metrics).
  int64_t reconnects() const;

 private:
  class Impl;
  explicit BatchStream(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardcast

#endif  // SHARDCAST_CLIENT_BATCH_STREAM_H_
