// Fuzzes JPEG, PNG and WebP decoding and the transforms (DecodeAndTransform, DecodeImage,
// ReadImageInfo) on arbitrary bytes. The first byte picks the transform (center or
// random crop, sizes, DCT scaling); the rest is the image. Decode memory goes through a
// DecodeAdmission of 64 MiB, as the server's budget would: a header that claims a
// huge image is refused before anything is allocated, so the fuzzer's RSS limit
// measures leaks and bugs, not legitimate big images. With DCT scaling off, the
// region-of-interest decode is checked against the whole-image decode + transform.
// JPEGs go through the lossless cut of encoded delivery too (CutJpegLosslessly, bounded
// by LosslessCutBytes as by the budget), and the cut's decode (DecodeWithCrop) must give
// DecodeAndTransform's bytes whenever both succeed.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "absl/status/status.h"
#include "common/image/image_transform.h"
#include "common/image/jpeg_lossless_cut.h"

namespace {

constexpr int64_t kDecodeBudgetBytes = int64_t{64} << 20;

class FuzzAdmission : public shardcast::DecodeAdmission {
 public:
  absl::Status Acquire(int64_t bytes) override {
    if (bytes < 0) std::abort();  // a negative figure would be an overflow
    if (bytes > kDecodeBudgetBytes) return absl::ResourceExhaustedError("over the fuzz budget");
    held_ += bytes;
    return absl::OkStatus();
  }
  void Release(int64_t bytes) override { held_ -= bytes; }
  int64_t held() const { return held_; }

 private:
  int64_t held_ = 0;
};

// The cut of `image` that a server would send for `spec`'s crop, decoded as a client
// would: aborts when it decodes to other bytes than the server's `transformed` ones.
void CheckLosslessCut(absl::string_view image, const shardcast::ImageInfo& info,
                      const shardcast::TransformSpec& spec, uint64_t seed,
                      const absl::Status& transformed, const std::vector<uint8_t>& out) {
  if (info.format != shardcast::ImageFormat::kJpeg ||
      shardcast::LosslessCutBytes(info) > kDecodeBudgetBytes) {
    return;
  }
  absl::StatusOr<shardcast::EncodedPlan> plan = shardcast::PlanEncodedSample(image, spec, seed);
  if (!plan.ok()) return;
  absl::StatusOr<shardcast::SourceRect> needed =
      shardcast::SourcePixelsRead(plan->info, plan->crop, spec.dct_scaling);
  if (!needed.ok()) return;
  absl::StatusOr<shardcast::LosslessCut> cut =
      shardcast::CutJpegLosslessly(image, plan->info, *needed);
  if (!cut.ok()) return;
  std::vector<uint8_t> from_cut(out.size());
  FuzzAdmission admission;
  const absl::Status decoded = shardcast::DecodeWithCrop(cut->bytes, plan->crop, spec.dct_scaling,
                                                         from_cut.data(), &admission, &cut->window);
  if (admission.held() != 0) std::abort();
  if (decoded.ok() && transformed.ok() && from_cut != out) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t selector = data[0];
  const absl::string_view image(reinterpret_cast<const char*>(data) + 1, size - 1);

  shardcast::TransformSpec spec;
  spec.mode =
      (selector & 1) ? shardcast::TransformMode::kRandom : shardcast::TransformMode::kCenter;
  spec.crop = 1 + ((selector >> 1) & 15);  // 1..16
  spec.resize = spec.crop + ((selector >> 5) & 3) * 5;
  spec.dct_scaling = (selector & 0x80) == 0;
  std::vector<uint8_t> out(3 * static_cast<size_t>(spec.crop) * spec.crop);
  FuzzAdmission admission;
  const absl::Status transformed =
      shardcast::DecodeAndTransform(image, spec, /*augment_seed=*/selector, out.data(), &admission);
  if (admission.held() != 0) std::abort();  // every acquired byte is given back

  absl::StatusOr<shardcast::ImageInfo> info = shardcast::ReadImageInfo(image);
  if (info.ok()) CheckLosslessCut(image, *info, spec, selector, transformed, out);
  if (info.ok() && shardcast::DecodeBufferBytes(*info, 1, 1) <= kDecodeBudgetBytes) {
    absl::StatusOr<shardcast::RgbImage> decoded = shardcast::DecodeImage(image);
    if (decoded.ok() &&
        decoded->pixels.size() != static_cast<size_t>(decoded->width) * decoded->height * 3) {
      std::abort();
    }
    // Without DCT scaling, DecodeAndTransform (a region decode for sequential JPEGs)
    // must give the bytes of the whole-image decode + ApplyTransform whenever both
    // succeed (the region decode may succeed alone: it never reads the rows below).
    if (decoded.ok() && !spec.dct_scaling && transformed.ok()) {
      std::vector<uint8_t> whole(out.size());
      if (shardcast::ApplyTransform(*decoded, spec, selector, whole.data()).ok() && whole != out) {
        std::abort();
      }
    }
  }
  return 0;
}
