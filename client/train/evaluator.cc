// Exact distributed evaluation (see evaluator.h).
#include "client/train/evaluator.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace shardcast::train {

void AccumulateEval(const torch::Tensor& logits, const torch::Tensor& labels,
                    const torch::Tensor& valid, EvalSums* sums) {
  torch::NoGradGuard no_grad;
  const torch::Tensor counted = valid & (labels >= 0);
  sums->substituted += (valid & (labels < 0)).sum().item<int64_t>();
  if (!counted.any().item<bool>()) return;
  const torch::Tensor x = logits.index({counted}).to(torch::kFloat32);
  const torch::Tensor y = labels.index({counted});
  // Summed in float64 so the order in which ranks and batches add up barely matters.
  sums->loss_sum +=
      torch::nn::functional::cross_entropy(
          x, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
          .to(torch::kFloat64)
          .item<double>();
  const int64_t k = std::min<int64_t>(5, x.size(1));
  const torch::Tensor top = std::get<1>(x.topk(k, /*dim=*/1));
  const torch::Tensor hits = top.eq(y.unsqueeze(1));
  sums->correct1 += hits.select(1, 0).sum().item<int64_t>();
  sums->correct5 += hits.any(1).sum().item<int64_t>();
  sums->count += y.size(0);
}

Evaluator::Evaluator(Communicator* comm, BatchSource* source, TrainableModel* model,
                     int64_t expected_samples, torch::Device device)
    : comm_(comm),
      source_(source),
      model_(model),
      expected_samples_(expected_samples),
      device_(device) {}

absl::StatusOr<EvalSums> Evaluator::Run() {
  // Parameters are equal on every rank (DDP); BatchNorm statistics are rank 0's.
  std::vector<torch::Tensor> buffers;
  for (auto& [name, t] : model_->NamedBuffers()) buffers.push_back(t);
  if (comm_->world_size() > 1 && !buffers.empty()) {
    if (absl::Status s = comm_->BroadcastCoalesced(buffers, 0); !s.ok()) return s;
  }
  model_->SetTraining(false);
  EvalSums mine;
  int64_t batches = 0;
  // The val job's epoch 0, always: the val set is the same each time, and the
  // server keeps its plan cached.
  absl::Status status = source_->StartEpoch(0, 0);
  while (status.ok()) {
    absl::StatusOr<std::optional<TrainingBatch>> next = source_->Next();
    if (!next.ok()) {
      status = next.status();
      break;
    }
    if (!next->has_value()) break;
    const TrainingBatch& batch = **next;
    try {
      torch::NoGradGuard no_grad;
      AccumulateEval(model_->Forward(batch.images), batch.labels, batch.valid, &mine);
    } catch (const std::exception& e) {
      status = absl::InternalError(
          absl::StrCat("validation batch ", batch.index,
                       ": forward failed: ", std::string(e.what()).substr(0, 500)));
    }
    ++batches;
  }
  model_->SetTraining(true);
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("validation: ", status.message()));
  }
  if (batches != source_->batches_per_epoch()) {
    return absl::DataLossError(absl::StrFormat("validation: this rank got %d batches, expected %d",
                                               batches, source_->batches_per_epoch()));
  }
  torch::Tensor sums =
      torch::tensor(
          {mine.loss_sum, static_cast<double>(mine.correct1), static_cast<double>(mine.correct5),
           static_cast<double>(mine.count), static_cast<double>(mine.substituted)},
          torch::TensorOptions().dtype(torch::kFloat64))
          .to(device_);
  if (absl::Status s = comm_->AllReduce(sums); !s.ok()) return s;
  const torch::Tensor all = sums.cpu();
  EvalSums total;
  total.loss_sum = all[0].item<double>();
  total.correct1 = std::llround(all[1].item<double>());
  total.correct5 = std::llround(all[2].item<double>());
  total.count = std::llround(all[3].item<double>());
  total.substituted = std::llround(all[4].item<double>());
  // Every sample once: counted, or left out as a substitute.
  if (total.count + total.substituted != expected_samples_) {
    return absl::DataLossError(absl::StrFormat(
        "validation counted %d samples (and %d substitutes left out) over %d ranks, the val "
        "set has %d; the ranks' parts must cover it exactly once (split sample, remainder pad)",
        total.count, total.substituted, comm_->world_size(), expected_samples_));
  }
  return total;
}

}  // namespace shardcast::train
