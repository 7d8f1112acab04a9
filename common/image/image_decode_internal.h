// Internal decode entry points shared by image_decode.cc and image_transform.cc:
// decoding at an explicit DCT scaling factor into a reusable image.
#ifndef SHARDCAST_COMMON_IMAGE_IMAGE_DECODE_INTERNAL_H_
#define SHARDCAST_COMMON_IMAGE_IMAGE_DECODE_INTERNAL_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/image/image_types.h"

namespace shardcast {
namespace internal {

// PIL refuses images over 2 * MAX_IMAGE_PIXELS (decompression bomb); so do we,
// before allocating: a corrupt header must not make us allocate gigabytes.
constexpr int64_t kMaxPixels = 2 * 89478485LL;

// OK when a w x h image (as its header says) has pixels and is within kMaxPixels;
// else an error naming `what` ("JPEG", "PNG", "WebP") and the size.
absl::Status CheckDimensions(int64_t w, int64_t h, const char* what);

// `status` marked as a refusal for the image's format (IsUnsupportedImageFormat): a
// payload, so the code and message stay as they are.
absl::Status MarkUnsupportedFormat(absl::Status status);

// A TurboJPEG DCT scaling factor num/denom (<= 1 here: we never upscale in DCT).
struct ScalingFactor {
  int num = 1;
  int denom = 1;
};

// The smallest factor accepted by `acceptable` among those TurboJPEG offers
// that are <= 1 and worth using (see kind comment in image_decode.cc); 1/1 if
// none smaller is acceptable.
ScalingFactor ChooseScalingFactor(const std::function<bool(ScalingFactor)>& acceptable);

// ceil(size * f), as TurboJPEG's TJSCALED computes the decoded size.
int ScaledSize(int size, ScalingFactor f);

// Decodes `encoded` (JPEG at factor `f`; PNG and WebP always at 1/1) into `*out`,
// reusing its buffer's capacity. On error *out is unspecified.
absl::Status DecodeInto(absl::string_view encoded, ScalingFactor f, RgbImage* out);

}  // namespace internal
}  // namespace shardcast

#endif  // SHARDCAST_COMMON_IMAGE_IMAGE_DECODE_INTERNAL_H_
