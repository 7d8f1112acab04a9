// An image member as the wire's EncodedImage (see encoded_image.h).
#include "server/assembly/encoded_image.h"

#include <utility>

#include "absl/status/statusor.h"
#include "common/image/image_transform.h"

namespace shardcast::server {

namespace {

// The bytes the client decodes: the member as stored. (A lossless cut of a random
// crop's JPEG would be chosen here, with EncodedImage.cut_*.)
void SetImageData(std::string member, const EncodedPlan& /*plan*/,
                  shardcast::v1::EncodedImage* out) {
  out->set_data(std::move(member));
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
                         DecodeBudget* budget, shardcast::v1::EncodedImage* out) {
  absl::StatusOr<EncodedPlan> plan = PlanEncodedSample(member, spec, augment_seed);
  if (!plan.ok()) return plan.status();
  if (budget != nullptr) {
    if (absl::Status fits = budget->CheckFits(plan->decode_bytes); !fits.ok()) return fits;
  }
  SetCrop(plan->crop, out);
  SetImageData(std::move(member), *plan, out);
  return absl::OkStatus();
}

}  // namespace shardcast::server
