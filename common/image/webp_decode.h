// WebP (libwebp): the header's size, alpha and kind without decoding, and the decode
// of a still image to RGB as PIL's Image.open(...).convert("RGB") gives it.
#ifndef SHARDCAST_COMMON_IMAGE_WEBP_DECODE_H_
#define SHARDCAST_COMMON_IMAGE_WEBP_DECODE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/image/image_types.h"

namespace shardcast {
namespace internal {

// "RIFF" <size> "WEBP": the container every WebP file starts with.
bool IsWebp(absl::string_view encoded);

// Width, height, alpha and lossless from the header (WebPGetFeatures), checked against
// the pixel limit. An animated WebP is refused here: only still images are decoded.
absl::StatusOr<ImageInfo> ReadWebpInfo(absl::string_view encoded);

// The bytes decoding `info`'s image allocates: the RGB pixels, plus libwebp's
// whole-image buffers: a lossless image is decoded to 4-byte ARGB first, and a lossy
// one with alpha keeps an alpha plane and decodes it (a lossless stream) the same way.
// Row caches and entropy-code tables are not counted: a lossless stream's tables depend
// on how many entropy groups it names (up to 65,536, a few KB each), which the header
// does not say; the only bound from the header (20 KB for every 4x4 block) would refuse
// real lossless images under ordinary budgets (docs/server.md, decode memory budget).
int64_t WebpDecodeBytes(const ImageInfo& info);

// Decodes a still WebP into `*out` (reusing its buffer's capacity): alpha dropped, not
// composited, as PIL's convert("RGB"). Corrupt or truncated data is an error naming
// libwebp's status. On error *out is unspecified.
absl::Status DecodeWebp(absl::string_view encoded, RgbImage* out);

}  // namespace internal
}  // namespace shardcast

#endif  // SHARDCAST_COMMON_IMAGE_WEBP_DECODE_H_
