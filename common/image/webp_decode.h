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

// An upper bound on the bytes decoding `info`'s image touches: the RGB pixels, plus
// libwebp's whole-image buffers (a lossless image is decoded to 4-byte ARGB first, and
// a lossy one with alpha keeps an alpha plane and decodes it, a lossless stream, the
// same way), plus what a lossless stream builds beside its pixels: entropy-code tables
// for every group it names, bounded by the image's size and the stream's length
// (info.lossless_stream_bytes), and its entropy and transform images and row cache.
int64_t WebpDecodeBytes(const ImageInfo& info);

// The most WebpDecodeBytes gives for any WebP ReadWebpInfo accepts.
int64_t MaxWebpDecodeBytes();

// Decodes a still WebP into `*out` (reusing its buffer's capacity): alpha dropped, not
// composited, as PIL's convert("RGB"). Corrupt or truncated data is an error naming
// libwebp's status. On error *out is unspecified.
absl::Status DecodeWebp(absl::string_view encoded, RgbImage* out);

}  // namespace internal
}  // namespace shardcast

#endif  // SHARDCAST_COMMON_IMAGE_WEBP_DECODE_H_
