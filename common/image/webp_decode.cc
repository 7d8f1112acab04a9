// WebP through libwebp's advanced decoding API: the features come from the header
// before any pixel buffer exists, and the decoder writes straight into ours.
#include "common/image/webp_decode.h"

#include <webp/decode.h>

#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/image/image_decode_internal.h"

namespace shardcast {
namespace internal {
namespace {

const char* StatusText(VP8StatusCode status) {
  switch (status) {
    case VP8_STATUS_OK:
      return "ok";
    case VP8_STATUS_OUT_OF_MEMORY:
      return "out of memory";
    case VP8_STATUS_INVALID_PARAM:
      return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR:
      return "corrupt bitstream";
    case VP8_STATUS_UNSUPPORTED_FEATURE:
      return "unsupported feature";
    case VP8_STATUS_SUSPENDED:
      return "suspended";
    case VP8_STATUS_USER_ABORT:
      return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA:
      return "not enough data (truncated)";
  }
  return "unknown libwebp status";
}

const uint8_t* Bytes(absl::string_view b) { return reinterpret_cast<const uint8_t*>(b.data()); }

// The header's features, refused before anything is allocated when the image is
// animated or over the pixel limit.
absl::Status ReadFeatures(absl::string_view b, WebPBitstreamFeatures* features) {
  if (const VP8StatusCode status = WebPGetFeatures(Bytes(b), b.size(), features);
      status != VP8_STATUS_OK) {
    return absl::InvalidArgumentError(
        absl::StrFormat("corrupt WebP header (%d bytes): %s", b.size(), StatusText(status)));
  }
  // PIL would show the first frame composited on the canvas; libwebp's still-image
  // decoder does not composite frames, so an animation is refused rather than served
  // as something else.
  if (features->has_animation) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "animated WebP (%dx%d canvas, %d bytes): only still WebP images are decoded",
        features->width, features->height, b.size()));
  }
  return CheckDimensions(features->width, features->height, "WebP");
}

}  // namespace

bool IsWebp(absl::string_view b) {
  return b.size() >= 12 && std::memcmp(b.data(), "RIFF", 4) == 0 &&
         std::memcmp(b.data() + 8, "WEBP", 4) == 0;
}

absl::StatusOr<ImageInfo> ReadWebpInfo(absl::string_view encoded) {
  WebPBitstreamFeatures features;
  if (absl::Status s = ReadFeatures(encoded, &features); !s.ok()) return s;
  ImageInfo info;
  info.width = features.width;
  info.height = features.height;
  info.format = ImageFormat::kWebp;
  info.alpha = features.has_alpha != 0;
  info.lossless = features.format == 2;  // 0 mixed (animations only), 1 lossy, 2 lossless
  return info;
}

int64_t WebpDecodeBytes(const ImageInfo& info) {
  const int64_t pixels = int64_t{info.width} * info.height;
  int64_t bytes_per_pixel = 3;                                 // the RGB output
  if (info.lossless) bytes_per_pixel += 4;                     // the ARGB image
  if (!info.lossless && info.alpha) bytes_per_pixel += 1 + 4;  // alpha plane + its ARGB decode
  return pixels * bytes_per_pixel;
}

absl::Status DecodeWebp(absl::string_view encoded, RgbImage* out) {
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) {
    return absl::InternalError("libwebp: WebPInitDecoderConfig failed (header/library mismatch)");
  }
  if (absl::Status s = ReadFeatures(encoded, &config.input); !s.ok()) return s;
  const int w = config.input.width, h = config.input.height;
  out->width = w;
  out->height = h;
  out->pixels.resize(static_cast<size_t>(w) * h * 3);
  // MODE_RGB drops alpha without compositing, as PIL's RGBA -> RGB conversion does.
  config.output.colorspace = MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = out->pixels.data();
  config.output.u.RGBA.stride = w * 3;
  config.output.u.RGBA.size = out->pixels.size();
  const VP8StatusCode status = WebPDecode(Bytes(encoded), encoded.size(), &config);
  if (status != VP8_STATUS_OK) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "WebP %dx%d (%s, %d bytes) failed to decode: %s", w, h,
        config.input.format == 2 ? "lossless" : "lossy", encoded.size(), StatusText(status)));
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace shardcast
