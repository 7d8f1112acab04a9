// The model a trainer rank trains: torchvision's ResNet-18 built in C++, a small
// BN-free CNN (tests and benchmarks), or a TorchScript module loaded from a file.
#ifndef SHARDCAST_CLIENT_TRAIN_MODEL_H_
#define SHARDCAST_CLIENT_TRAIN_MODEL_H_

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/train/mixed_precision.h"

namespace shardcast::train {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// How a model computes: autocast precision and the memory format of its 4-D weights
// and inputs. channels_last (NHWC) is what cuDNN's tensor-core convolutions read
// directly; NCHW makes them transpose every activation.
struct ComputeFormat {
  Precision precision = Precision::kFp32;
  bool channels_last = false;
};

// One interface over torch::nn::Module and torch::jit::Module, so the trainer, DDP and
// checkpoints do not care which one runs.
class TrainableModel {
 public:
  virtual ~TrainableModel() = default;

  // images [B,3,H,W] float -> logits [B,num_classes] float32, computed in the compute
  // format (the input converted to channels_last when that is set, the forward pass
  // under autocast when the precision is not fp32).
  torch::Tensor Forward(const torch::Tensor& images);
  // Sets the compute format; converts the 4-D parameters and buffers to channels_last
  // (kept by To()) or back. Weights stay fp32: autocast casts them per step.
  void SetComputeFormat(const ComputeFormat& format);
  const ComputeFormat& compute_format() const { return format_; }
  // Parameters and buffers in a fixed registration order (equal on every rank, which
  // the DDP broadcast and bucketing rely on). Names are state_dict keys.
  virtual NamedTensors NamedParameters() = 0;
  virtual NamedTensors NamedBuffers() = 0;
  virtual void SetTraining(bool training) = 0;
  virtual void To(torch::Device device) = 0;
  // Writes the final model. nn::Module models: a state_dict (name -> CPU tensor) in the
  // zip format of Python's torch.save (SaveStateDict), readable with torch.load(path)
  // under weights_only=True (and keys match torchvision's resnet18) or
  // torch::pickle_load. TorchScript models: module.save().
  virtual absl::Status SaveFinal(const std::string& path) = 0;
  virtual std::string Describe() const = 0;

  std::vector<torch::Tensor> Parameters();

 protected:
  virtual torch::Tensor ForwardImpl(const torch::Tensor& images) = 0;
  // Re-applies the memory format of format_ to the parameters and buffers (after To()).
  void ApplyMemoryFormat();

 private:
  ComputeFormat format_;
};

struct ModelSpec {
  std::string arch = "resnet18";  // "resnet18" | "small-cnn"
  std::string torchscript_path;   // non-empty: load this instead of `arch`
  int64_t num_classes = 0;
  uint64_t init_seed = 0;  // random init (not used for TorchScript modules)
};

absl::StatusOr<std::unique_ptr<TrainableModel>> MakeModel(const ModelSpec& spec);

// Writes `tensors` (moved to the CPU) as a state_dict that Python's torch.load(path)
// reads under its safe default (weights_only=True), on torch 1.13 and 2.x.
absl::Status SaveStateDict(const std::string& path, const NamedTensors& tensors);

// Reads a state_dict written by SaveFinal for an nn::Module model (tests, tools), or
// by torch::pickle_save (the format before SaveStateDict).
absl::StatusOr<NamedTensors> LoadStateDict(const std::string& path);

// Copies a state_dict written by SaveFinal (--save) into `model`'s parameters and
// buffers, by name. FAILED_PRECONDITION names a missing key or a shape that differs.
absl::Status LoadWeights(const std::string& path, TrainableModel& model);

// Atomically replaces `path` with `bytes` (write to a temp file, fsync, rename), so a
// crash never leaves a half-written checkpoint or model behind.
absl::Status WriteFileAtomically(const std::string& path, const char* data, size_t size);

}  // namespace shardcast::train

#endif  // SHARDCAST_CLIENT_TRAIN_MODEL_H_
