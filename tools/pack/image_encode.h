// In-memory image encoders (TurboJPEG, libpng) for generated datasets and tests
// that need real JPEG/PNG files of a known shape and kind.
#ifndef SHARDCAST_TOOLS_PACK_IMAGE_ENCODE_H_
#define SHARDCAST_TOOLS_PACK_IMAGE_ENCODE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace shardcast::pack {

enum class ChromaSubsampling { k444, k422, k420, kGray };

struct JpegOptions {
  int quality = 90;  // 1..100
  ChromaSubsampling subsampling = ChromaSubsampling::k420;
  bool progressive = false;
};

// Encodes `rgb` (height x width x 3, row-major, tightly packed) as a JPEG.
// With kGray the image is converted to one luminance channel first.
// Deterministic: the same pixels and options give the same bytes.
absl::StatusOr<std::string> EncodeJpeg(const uint8_t* rgb, int width, int height,
                                       const JpegOptions& options = {});

// Encodes `rgb` (height x width x 3) as an 8-bit RGB PNG.
absl::StatusOr<std::string> EncodePng(const uint8_t* rgb, int width, int height);

}  // namespace shardcast::pack

#endif  // SHARDCAST_TOOLS_PACK_IMAGE_ENCODE_H_
