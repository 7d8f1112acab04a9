// An image member as the wire's EncodedImage (see encoded_image.h).
#include "server/assembly/encoded_image.h"

#include <optional>
#include <utility>

#include "absl/status/statusor.h"
#include "common/image/image_transform.h"
#include "common/image/jpeg_lossless_cut.h"

namespace shardcast::server {

namespace {

// The cut of a random crop's JPEG to what the crop reads, if one can be made and is
// smaller; nullopt otherwise (the stored bytes are sent).
std::optional<LosslessCut> SmallerCut(const std::string& member, const EncodedPlan& plan,
                                      const TransformSpec& spec, DecodeBudget* budget) {
  if (plan.crop.mode != TransformMode::kRandom || plan.info.format != ImageFormat::kJpeg) {
    return std::nullopt;
  }
  absl::StatusOr<SourceRect> needed = SourcePixelsRead(plan.info, plan.crop, spec.dct_scaling);
  if (!needed.ok()) return std::nullopt;
  // Held, not only checked: the cut really allocates the image's coefficients. An image
  // the budget cannot hold at all is sent whole (CheckFits, not counted as a refusal).
  const int64_t bytes = LosslessCutBytes(plan.info);
  if (budget != nullptr && bytes > budget->limit()) return std::nullopt;
  if (budget != nullptr && !budget->Acquire(bytes).ok()) return std::nullopt;
  absl::StatusOr<LosslessCut> cut = CutJpegLosslessly(member, plan.info, *needed);
  if (budget != nullptr) budget->Release(bytes);
  if (!cut.ok() || cut->bytes.size() >= member.size()) return std::nullopt;
  return *std::move(cut);
}

// The bytes the client decodes: the member as stored, or its cut (cut_* set, the crop's
// left and top then counted from the cut).
void SetImageData(std::string member, const EncodedPlan& plan, const TransformSpec& spec,
                  DecodeBudget* budget, bool lossless_cut, shardcast::v1::EncodedImage* out) {
  std::optional<LosslessCut> cut;
  if (lossless_cut) cut = SmallerCut(member, plan, spec, budget);
  if (!cut.has_value()) {
    out->set_data(std::move(member));
    return;
  }
  out->set_data(std::move(cut->bytes));
  out->set_left(plan.crop.left - cut->window.left);
  out->set_top(plan.crop.top - cut->window.top);
  out->set_cut_left(cut->window.left);
  out->set_cut_top(cut->window.top);
  out->set_cut_width(cut->window.width);
  out->set_cut_height(cut->window.height);
}

void SetCrop(const SampleCrop& crop, shardcast::v1::EncodedImage* out) {
  out->set_source_width(crop.source_width);
  out->set_source_height(crop.source_height);
  out->set_left(crop.left);
  out->set_top(crop.top);
  out->set_width(crop.width);
  out->set_height(crop.height);
  out->set_resize_width(crop.resize_width);
  out->set_resize_height(crop.resize_height);
  out->set_flip(crop.flip);
  out->set_output_size(crop.output);
}

}  // namespace

absl::Status EncodeImage(std::string member, const TransformSpec& spec, uint64_t augment_seed,
                         DecodeBudget* budget, bool lossless_cut,
                         shardcast::v1::EncodedImage* out) {
  absl::StatusOr<EncodedPlan> plan = PlanEncodedSample(member, spec, augment_seed);
  if (!plan.ok()) return plan.status();
  if (budget != nullptr) {
    if (absl::Status fits = budget->CheckFits(plan->decode_bytes); !fits.ok()) return fits;
  }
  SetCrop(plan->crop, out);
  SetImageData(std::move(member), *plan, spec, budget, lossless_cut, out);
  return absl::OkStatus();
}

}  // namespace shardcast::server
