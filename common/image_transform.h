// Decode (TurboJPEG, PNG) + torchvision-equivalent transforms into a caller's
// uint8 CHW buffer: the per-sample work of the serve path.
#ifndef SHARDCAST_COMMON_IMAGE_TRANSFORM_H_
#define SHARDCAST_COMMON_IMAGE_TRANSFORM_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardcast {

// Decoded image, interleaved RGB (HWC), 8 bits per channel.
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // height * width * 3
};

struct DecodeOptions {
  // When > 0, JPEGs may be decoded with DCT-domain downscaling (1/2, 1/4, 1/8...)
  // as long as the decoded width >= min_width and height >= min_height.
  int min_width = 0;
  int min_height = 0;
};

// Sniffs the content (JPEG or PNG, whatever the extension says); any JPEG
// colourspace (YCbCr any subsampling, grayscale, CMYK/YCCK) and PNG -> RGB.
// Thread-safe. Errors say what the content looked like and why it failed.
absl::StatusOr<RgbImage> DecodeImage(absl::string_view encoded, const DecodeOptions& options = {});

enum class TransformMode {
  kCenter,  // Resize(short side = resize, bilinear, antialias) + CenterCrop(crop)
  kRandom,  // RandomResizedCrop(crop, scale=(0.08,1), ratio=(3/4,4/3)) + HFlip(p=0.5)
};

struct TransformSpec {
  TransformMode mode = TransformMode::kCenter;
  int resize = 256;  // short side for kCenter
  int crop = 224;    // output is crop x crop
  bool dct_scaling = true;  // allow DCT-domain downscale (never below what's needed)
};

// Writes 3 * crop * crop bytes, planar RGB (CHW), to `out_chw`.
// `augment_seed` drives kRandom (same seed -> same bytes); ignored for kCenter.
absl::Status ApplyTransform(const RgbImage& image, const TransformSpec& spec,
                            uint64_t augment_seed, uint8_t* out_chw);

// Decode + transform in one call, choosing the DCT scale from the transform.
absl::Status DecodeAndTransform(absl::string_view encoded, const TransformSpec& spec,
                                uint64_t augment_seed, uint8_t* out_chw);

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_IMAGE_TRANSFORM_H_
