// BatchStream: one rank's stream of a shardcast job as torch tensors. The protocol
// (register, prefetch, checks, reconnect and resume) is RankStream's, seen through
// RankFeed's plain types (client/stream/rank_feed.h: no generated protobuf code meets
// LibTorch's headers); this adds the tensors: the received image bytes, kept in gRPC's
// buffers, are read once, into pinned memory for a non_blocking copy to CUDA
// (normalized there) or straight into normalized floats on the CPU.
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
#include "client/stream/rank_feed.h"

namespace shardcast {

// The protocol's options (server, credentials, job, prefetch, reconnect) plus where
// the tensors go.
// What a batch's substituted samples become: the server sends a mid-grey image for an
// image it could not decode (SampleMeta::substituted), which must not train with its
// real label.
enum class OnSubstitute {
  kMask,  // the label is -1, as padding's: left out of the loss and the accuracy
  kFail,  // Next() fails, naming the sample
};

struct BatchStreamOptions : client::RankFeedOptions {
  // For CUDA the host tensor is pinned and copied non_blocking.
  torch::Device device = torch::kCPU;
  OnSubstitute on_substitute = OnSubstitute::kMask;
  // Normalization applied on `device`: (x/255 - mean) / std, per channel.
  std::vector<double> mean = {0.485, 0.456, 0.406};
  std::vector<double> std = {0.229, 0.224, 0.225};
};

using SampleMeta = client::SampleMeta;

struct TrainingBatch {
  int64_t epoch = 0;
  int64_t index = 0;
  torch::Tensor images;  // [B,3,C,C] float32 normalized, on options.device
  torch::Tensor labels;  // [B] int64 on options.device (-1 for padding, masked substitutes)
  torch::Tensor valid;   // [B] bool on options.device
  std::vector<SampleMeta> samples;
  int64_t substituted = 0;     // samples the server substituted (masked: OnSubstitute)
  client::FeedBatch received;  // the batch as received, pixels included

  // The received pixels as [B,3,C,C] uint8 on the CPU: a view of the received buffer
  // when gRPC delivered them in one piece, else a copy made by this call.
  torch::Tensor ImagesUint8() const;
};

class BatchStream {
 public:
  // Checks mean/std/device, then RankFeed::Connect; FAILED_PRECONDITION for a job served
  // without images (fields alone: read those with RankStream).
  static absl::StatusOr<std::unique_ptr<BatchStream>> Connect(BatchStreamOptions options);
  ~BatchStream();
  BatchStream(const BatchStream&) = delete;
  BatchStream& operator=(const BatchStream&) = delete;

  const client::Registration& registration() const;
  int64_t batches_per_epoch() const;

  // Starts streaming `epoch` from `start_batch` (cancels any stream in progress);
  // `sample_offset` > 0: an elastic resume; `mix_resume`: a mixed job resumed from
  // another run (RankFeed::StartEpoch).
  absl::Status StartEpoch(int64_t epoch, int64_t start_batch = 0, int64_t sample_offset = 0,
                          const client::MixResume& mix_resume = {});
  // Batches of the epoch last started (RankStream::batches_in_epoch).
  int64_t batches_in_epoch() const;

  // RankFeed::Next as tensors; a tensor failure (device out of memory) is a status, and
  // so is a substituted sample under OnSubstitute::kFail (FAILED_PRECONDITION).
  absl::StatusOr<std::optional<TrainingBatch>> Next();

  // Reconnects made so far (for tests and metrics).
  int64_t reconnects() const;

 private:
  BatchStream(BatchStreamOptions options, std::unique_ptr<client::RankFeed> stream);
  TrainingBatch ToTensors(client::FeedBatch received);
  // Sets mean_/std_ on `device` (and the CPU table) unless they are there already.
  void SetNormalization(const torch::Device& device);

  const BatchStreamOptions options_;
  const std::unique_ptr<client::RankFeed> stream_;
  // Normalization constants on the device of the last batch (consumer thread only).
  torch::Tensor mean_;
  torch::Tensor std_;
  // CPU: the normalized value of each byte value per channel, [3][256], computed by
  // the same torch ops that normalize on a device, so both give the same floats.
  std::vector<float> normalize_table_;
};

}  // namespace shardcast

#endif  // SHARDCAST_CLIENT_BATCH_STREAM_H_
