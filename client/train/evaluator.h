// Exact distributed evaluation: every rank streams its part of a validation set
// (split sample, remainder pad), masks the padding, and the ranks all-reduce sums of
// loss, correct@1, correct@5 and count, so every val sample counts exactly once for
// any val size, batch size and world size.
#ifndef SHARDCAST_CLIENT_TRAIN_EVALUATOR_H_
#define SHARDCAST_CLIENT_TRAIN_EVALUATOR_H_

#include <torch/torch.h>

#include <cstdint>

#include "absl/status/statusor.h"
#include "client/train/batch_source.h"
#include "client/train/ddp.h"
#include "client/train/model.h"

namespace shardcast::train {

// Sums over samples (never means, so ranks and batches add up exactly).
struct EvalSums {
  double loss_sum = 0;  // cross-entropy summed over the counted samples
  int64_t correct1 = 0;
  int64_t correct5 = 0;
  int64_t count = 0;
  // Samples left out because the server substituted their image (a real sample with its
  // label masked to -1: BatchStream's OnSubstitute::kMask), not padding.
  int64_t substituted = 0;

  double loss() const { return count > 0 ? loss_sum / count : 0.0; }
  double top1() const { return count > 0 ? static_cast<double>(correct1) / count : 0.0; }
  double top5() const { return count > 0 ? static_cast<double>(correct5) / count : 0.0; }
};

// Adds one batch to `sums`: samples where `valid` is false (padding) or whose label
// is negative are left out. With fewer than 5 classes, top-5 is every class (always
// correct). logits [B,C] float, labels [B] int64, valid [B] bool, on one device.
void AccumulateEval(const torch::Tensor& logits, const torch::Tensor& labels,
                    const torch::Tensor& valid, EvalSums* sums);

class Evaluator {
 public:
  // REQUIRES: all pointers outlive the Evaluator. `source` is this rank's stream of
  // the val job (split sample, remainder pad); `expected_samples` is the val set's
  // size, which the all-reduced count must equal.
  Evaluator(Communicator* comm, BatchSource* source, TrainableModel* model,
            int64_t expected_samples, torch::Device device);

  // Evaluates the model as rank 0 holds it (its buffers are broadcast first) over the
  // whole val set; every rank must call it. The model is left in training mode.
  // DATA_LOSS when the ranks' counts do not add up to the val set's size, or a rank
  // ran short.
  absl::StatusOr<EvalSums> Run();

  int64_t expected_samples() const { return expected_samples_; }

 private:
  Communicator* comm_;
  BatchSource* source_;
  TrainableModel* model_;
  const int64_t expected_samples_;
  const torch::Device device_;
};

}  // namespace shardcast::train

#endif  // SHARDCAST_CLIENT_TRAIN_EVALUATOR_H_
