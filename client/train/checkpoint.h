// Training checkpoints: model parameters and buffers, optimizer state, and where the
// data stream stands (epoch, next batch), so --resume continues the same sequence.
#ifndef SHARDCAST_CLIENT_TRAIN_CHECKPOINT_H_
#define SHARDCAST_CLIENT_TRAIN_CHECKPOINT_H_

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/reconnect/mix_resume.h"
#include "client/train/model.h"

namespace shardcast::train {

struct CheckpointPosition {
  int64_t epoch = 0;        // epoch to continue with
  int64_t next_batch = 0;   // first batch of `epoch` not yet trained on
  int64_t global_step = 0;  // optimizer steps taken so far
  int64_t world_size = 1;
  int64_t batch_size = 0;
  std::string fingerprint;  // the batch source's job fingerprint
  // Global position `epoch` was dealt from (an elastic resume; 0 = its start).
  int64_t sample_offset = 0;
  // Batches per rank of `epoch` as dealt (0: unknown, in checkpoints from before it
  // was kept): next_batch == batches_in_epoch is a finished epoch.
  int64_t batches_in_epoch = 0;
  // A mixed job: how its runs drew the sequence (segments, schedule, data fingerprint,
  // epoch length), what a later run on another global batch or with new weights needs
  // (client/reconnect/mix_resume.h). No segments: not a mixture, or a checkpoint from
  // before they were kept (one segment at this checkpoint's global batch).
  client::MixRun mix;

  // Samples of `epoch` consumed by all ranks together (split sample): where a resume
  // with another world size or batch size continues the epoch from.
  int64_t SamplesConsumed() const { return sample_offset + next_batch * world_size * batch_size; }
};

// File format: a torch::serialize archive (torch::save/torch::load's format) holding
// "model.<state_dict key>" tensors, an "optimizer" sub-archive (Optimizer::save) and
// "meta.*" values. Written to a temp file and renamed: never half-written.
absl::Status SaveCheckpoint(const std::string& path, TrainableModel& model,
                            torch::optim::Optimizer& optimizer, const CheckpointPosition& position);

// Restores model and optimizer in place (tensors land on the model's device) and returns
// the position. Errors name the file and the mismatching tensor.
absl::StatusOr<CheckpointPosition> LoadCheckpoint(const std::string& path, TrainableModel& model,
                                                  torch::optim::Optimizer& optimizer,
                                                  torch::Device device);

// The model alone (evaluation: no optimizer to restore), and the position.
absl::StatusOr<CheckpointPosition> LoadCheckpointModel(const std::string& path,
                                                       TrainableModel& model, torch::Device device);

// "ckpt-e0002-b000150.pt"
std::string CheckpointFileName(int64_t epoch, int64_t next_batch);

// Saves into `dir` and updates dir/latest (a one-line text file naming the newest
// checkpoint); deletes older ckpt-*.pt beyond the newest `keep`. Returns the path.
absl::StatusOr<std::string> SaveCheckpointInDir(const std::string& dir, int keep,
                                                TrainableModel& model,
                                                torch::optim::Optimizer& optimizer,
                                                const CheckpointPosition& position);

// --resume accepts a checkpoint file or a --ckpt-dir (then its `latest`).
absl::StatusOr<std::string> ResolveResumePath(const std::string& path);

}  // namespace shardcast::train

#endif  // SHARDCAST_CLIENT_TRAIN_CHECKPOINT_H_
