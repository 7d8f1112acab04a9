// An image member as the wire's EncodedImage (see encoded_image.h).
#include "server/assembly/encoded_image.h"

#include <optional>
#include <utility>

#include "absl/status/statusor.h"
#include "common/image/image_transform.h"
#include "common/image/jpeg_lossless_cut.h"
#include "proto/encoded_image_proto.h"

namespace shardcast::server {

namespace {

// The cut of a random crop's JPEG to what the crop reads, if one can be made and is
// smaller; nullopt otherwise (the stored bytes are sent).
std::optional<LosslessCut> SmallerCut(const std::string& member, const EncodedPlan& plan,
                                      const TransformSpec& spec, MemoryBudget* budget) {
  if (plan.crop.mode != TransformMode::kRandom || plan.info.format != ImageFormat::kJpeg) {
    return std::nullopt;
  }
  absl::StatusOr<SourceRect> needed = SourcePixelsRead(plan.info, plan.crop, spec.dct_scaling);
  if (!needed.ok()) return std::nullopt;
  // Held, not only checked: the cut really allocates the image's coefficients. An image
  // the budget cannot hold at all is sent whole (CheckFits, not counted as a refusal).
  const int64_t bytes = LosslessCutBytes(plan.info);
  MemoryGrant held;
  if (budget != nullptr) {
    if (bytes > budget->limit()) return std::nullopt;
    absl::StatusOr<MemoryGrant> grant = budget->Grant(bytes);
    if (!grant.ok()) return std::nullopt;
    held = *std::move(grant);
  }
  absl::StatusOr<LosslessCut> cut = CutJpegLosslessly(member, plan.info, *needed);
  held.Reset();  // the cut's buffers are freed
  if (!cut.ok() || cut->bytes.size() >= member.size()) return std::nullopt;
  return *std::move(cut);
}

// The bytes the client decodes, the member as stored or its cut, and the crop (counted
// from the cut if there is one).
void SetImage(std::string member, const EncodedPlan& plan, const TransformSpec& spec,
              MemoryBudget* budget, bool lossless_cut, shardcast::v1::EncodedImage* out) {
  std::optional<LosslessCut> cut;
  if (lossless_cut) cut = SmallerCut(member, plan, spec, budget);
  SetWireCrop(plan.crop, cut.has_value() ? &cut->window : nullptr, out);
  out->set_data(cut.has_value() ? std::move(cut->bytes) : std::move(member));
}

}  // namespace

absl::Status EncodeImage(std::string member, const TransformSpec& spec, uint64_t augment_seed,
                         MemoryBudget* budget, bool lossless_cut,
                         shardcast::v1::EncodedImage* out) {
  absl::StatusOr<EncodedPlan> plan = PlanEncodedSample(member, spec, augment_seed);
  if (!plan.ok()) return plan.status();
  if (budget != nullptr) {
    if (absl::Status fits = budget->CheckFits(plan->decode_bytes); !fits.ok()) return fits;
  }
  SetImage(std::move(member), *plan, spec, budget, lossless_cut, out);
  return absl::OkStatus();
}

}  // namespace shardcast::server
