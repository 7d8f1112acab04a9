// Mixed precision for a training step, as Python's torch.autocast and
// torch.amp.GradScaler do it: the forward pass under autocast to bf16 or fp16 (matmuls
// and convolutions in the lower precision, reductions and the loss in fp32, weights kept
// in fp32), and for fp16 a dynamic loss scale, because fp16's range (min normal 6e-5)
// flushes small gradients to zero where bf16's (that of fp32) does not.
#ifndef SHARDCAST_CLIENT_TRAIN_MIXED_PRECISION_H_
#define SHARDCAST_CLIENT_TRAIN_MIXED_PRECISION_H_

#include <torch/torch.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardcast::train {

enum class Precision { kFp32, kBf16, kFp16 };

// "fp32", "bf16", "fp16"; parse errors name the accepted values.
const char* PrecisionName(Precision precision);
absl::StatusOr<Precision> ParsePrecision(absl::string_view name);
std::vector<std::string> PrecisionNames();

// What an unset --precision means: bf16 on CUDA (tensor cores run it at full rate from
// Ampere on, and it needs no loss scaling), fp32 on the CPU (most CPUs have no bf16
// arithmetic, so autocast there is slower, not faster).
Precision DefaultPrecision(const torch::Device& device);
// fp16 autocast exists for CUDA only in LibTorch: INVALID_ARGUMENT on the CPU.
absl::Status CheckPrecision(Precision precision, const torch::Device& device);

// Autocast on `device` to `precision` for the scope's lifetime (nothing for kFp32). On
// leaving the outermost scope the cast cache is cleared, as torch.autocast's __exit__
// does: the cached low-precision copies of the weights are stale after the step.
class AutocastScope {
 public:
  AutocastScope(Precision precision, const torch::Device& device);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  const bool active_;
  const c10::DeviceType device_type_;
  bool was_enabled_ = false;
  c10::ScalarType was_dtype_ = c10::ScalarType::Float;
};

// Dynamic loss scaling (GradScaler's defaults): the loss is multiplied by the scale
// before backward; after it the gradients are divided by it and checked; a step whose
// gradients hold an inf or NaN is skipped and the scale halved, and after
// `growth_interval` good steps in a row the scale doubles. Gradients are all-reduced
// before the check, so every rank sees the same verdict.
class LossScaler {
 public:
  explicit LossScaler(double initial_scale = 65536.0, int growth_interval = 2000);

  torch::Tensor Scale(const torch::Tensor& loss) const { return loss * scale_; }
  // Unscales the gradients of `params` in place and updates the scale. Returns false
  // when the step must be skipped (a gradient is not finite).
  bool UnscaleAndUpdate(const std::vector<torch::Tensor>& params);
  double scale() const { return scale_; }
  int64_t skipped_steps() const { return skipped_; }

 private:
  double scale_;
  const int growth_interval_;
  int good_steps_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace shardcast::train

#endif  // SHARDCAST_CLIENT_TRAIN_MIXED_PRECISION_H_
