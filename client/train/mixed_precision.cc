// Autocast scopes and the loss scaler (see mixed_precision.h).
#include "client/train/mixed_precision.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

// LibTorch 2.4 replaced the per-device autocast functions (set_enabled for CUDA,
// set_cpu_enabled, ...) by ones that take the device type.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define SHARDCAST_AUTOCAST_BY_DEVICE_TYPE 1
#endif

namespace shardcast::train {
namespace {

bool AutocastEnabled(c10::DeviceType type) {
#ifdef SHARDCAST_AUTOCAST_BY_DEVICE_TYPE
  return at::autocast::is_autocast_enabled(type);
#else
  return type == c10::DeviceType::CUDA ? at::autocast::is_enabled()
                                       : at::autocast::is_cpu_enabled();
#endif
}

void SetAutocastEnabled(c10::DeviceType type, bool enabled) {
#ifdef SHARDCAST_AUTOCAST_BY_DEVICE_TYPE
  at::autocast::set_autocast_enabled(type, enabled);
#else
  if (type == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(enabled);
  } else {
    at::autocast::set_cpu_enabled(enabled);
  }
#endif
}

c10::ScalarType AutocastDtype(c10::DeviceType type) {
#ifdef SHARDCAST_AUTOCAST_BY_DEVICE_TYPE
  return at::autocast::get_autocast_dtype(type);
#else
  return type == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                       : at::autocast::get_autocast_cpu_dtype();
#endif
}

void SetAutocastDtype(c10::DeviceType type, c10::ScalarType dtype) {
#ifdef SHARDCAST_AUTOCAST_BY_DEVICE_TYPE
  at::autocast::set_autocast_dtype(type, dtype);
#else
  if (type == c10::DeviceType::CUDA) {
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
}

constexpr Precision kAll[] = {Precision::kFp32, Precision::kBf16, Precision::kFp16};

}  // namespace

const char* PrecisionName(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
  }
  return "?";
}

std::vector<std::string> PrecisionNames() {
  std::vector<std::string> names;
  for (Precision p : kAll) names.push_back(PrecisionName(p));
  return names;
}

absl::StatusOr<Precision> ParsePrecision(absl::string_view name) {
  for (Precision p : kAll) {
    if (name == PrecisionName(p)) return p;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "precision must be one of ", absl::StrJoin(PrecisionNames(), ", "), ", got '", name, "'"));
}

Precision DefaultPrecision(const torch::Device& device) {
  return device.is_cuda() ? Precision::kBf16 : Precision::kFp32;
}

absl::Status CheckPrecision(Precision precision, const torch::Device& device) {
  if (precision == Precision::kFp16 && !device.is_cuda()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--precision fp16 needs a CUDA device (LibTorch autocasts to fp16 on CUDA only); "
        "on ",
        device.str(), " use bf16 or fp32"));
  }
  return absl::OkStatus();
}

namespace {

// The dtype autocast computes in for `precision` (fp32 never enables autocast).
c10::ScalarType AutocastType(Precision precision) {
  switch (precision) {
    case Precision::kBf16:
      return c10::ScalarType::BFloat16;
    case Precision::kFp16:
      return c10::ScalarType::Half;
    case Precision::kFp32:
      return c10::ScalarType::Float;
  }
  return c10::ScalarType::Float;
}

}  // namespace

AutocastScope::AutocastScope(Precision precision, const torch::Device& device)
    : active_(precision != Precision::kFp32), device_type_(device.type()) {
  if (!active_) return;
  was_enabled_ = AutocastEnabled(device_type_);
  was_dtype_ = AutocastDtype(device_type_);
  at::autocast::increment_nesting();
  SetAutocastEnabled(device_type_, true);
  SetAutocastDtype(device_type_, AutocastType(precision));
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  SetAutocastEnabled(device_type_, was_enabled_);
  SetAutocastDtype(device_type_, was_dtype_);
}

LossScaler::LossScaler(double initial_scale, int growth_interval)
    : scale_(initial_scale), growth_interval_(growth_interval) {}

bool LossScaler::UnscaleAndUpdate(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  torch::Tensor not_finite;
  const double inverse = 1.0 / scale_;
  for (const torch::Tensor& p : params) {
    if (!p.grad().defined()) continue;
    torch::Tensor g = p.mutable_grad();
    g.mul_(inverse);
    torch::Tensor bad = g.isfinite().logical_not().any();
    not_finite = not_finite.defined() ? not_finite.logical_or(bad) : bad;
  }
  // One device-to-host sync per step, as GradScaler.step has.
  const bool overflow = not_finite.defined() && not_finite.item<bool>();
  if (overflow) {
    scale_ *= 0.5;
    good_steps_ = 0;
    ++skipped_;
    return false;
  }
  if (++good_steps_ >= growth_interval_) {
    scale_ *= 2.0;
    good_steps_ = 0;
  }
  return true;
}

}  // namespace shardcast::train
