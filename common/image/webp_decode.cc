// WebP through libwebp's advanced decoding API: the features come from the header
// before any pixel buffer exists, and the decoder writes straight into ours.
#include "common/image/webp_decode.h"

#include <webp/decode.h>

#include <algorithm>
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
    return MarkUnsupportedFormat(absl::InvalidArgumentError(absl::StrFormat(
        "animated WebP (%dx%d canvas, %d bytes): only still WebP images are decoded",
        features->width, features->height, b.size())));
  }
  return CheckDimensions(features->width, features->height, "WebP");
}

// What a lossless stream (a lossless image, or the alpha plane of a lossy one) makes
// beside its ARGB pixels in libwebp 1.2.4 (Debian 12), from src/dec/vp8l_dec.c
// (ReadHuffmanCodes, ReadHuffmanCode, DecodeImageStream, AllocateInternalBuffers32b)
// and src/utils/huffman_utils.h.
//
// ReadHuffmanCodes allocates kTableSize[color_cache_bits] HuffmanCode entries for
// every entropy group; the largest, at MAX_CACHE_BITS (11), is FIXED_TABLE_SIZE
// (630 * 3 + 410) + 2704. The cache bits sit behind the transforms' entropy-coded
// images, so the largest is charged.
constexpr int64_t kTableEntriesPerGroup = 630 * 3 + 410 + 2704;
// HuffmanCode is {uint8_t bits; uint16_t value;}: 4 bytes with its padding.
constexpr int64_t kHuffmanCodeBytes = 4;
// HTreeGroup: 5 HuffmanCode pointers, 4 ints and packed_table[64] of HuffmanCode32
// ({int; uint32_t}, 8 bytes): 568 bytes on a 64-bit build.
constexpr int64_t kHTreeGroupBytes = 5 * 8 + 4 * 4 + 64 * 8;
constexpr int64_t kBytesPerGroup = kTableEntriesPerGroup * kHuffmanCodeBytes + kHTreeGroupBytes;
// A group is a 16-bit value (red and green) of the entropy image. libwebp keeps
// largest + 1 groups when that is at most 1000 and at most the image's pixels, else
// only the distinct values, at most one per entropy-image pixel: a block of at least
// 4x4 pixels (MIN_HUFFMAN_BITS 2).
constexpr int64_t kMaxGroups = 65536;
constexpr int64_t kMaxGroupsKeptWhole = 1000;
// The tables of a group are written only after its five codes are read, and only while
// the bit reader has not run past the stream's end; each code takes at least 4 bits (a
// simple one: is_simple, num_symbols - 1, is_first_8bits and a 1-bit symbol; a normal
// one at least 17). So a stream of n bytes writes the tables of at most 8n / 20 groups
// (rounded up); the rest of the allocation is never touched. (A crafted 295 KB stream
// naming 65,536 groups of one-symbol codes writes 256 entries a code: 370 MB.)
constexpr int64_t kMinBitsPerGroup = 5 * 4;
// The transforms' and the entropy image's own codes: one group each (no meta codes).
constexpr int64_t kSubImageGroups = 4 + 1;
// The entropy image and the predictor and cross-colour transforms' images: a 4-byte
// pixel per block of at least 4x4 pixels, each.
constexpr int64_t kSubImageBytesPerBlock = 3 * 4;
// Beside the whole-image ARGB pixels, a top row and NUM_ARGB_CACHE_ROWS (16) rows of
// 4-byte pixels.
constexpr int64_t kArgbCacheRows = 1 + 16;
// The int `mapping` from the groups named to those used (made, and filled, when over
// 1000 are named), then code_lengths (2,328 ints at the largest cache), the colour
// cache (2,048 words), the colour-indexing palette (256 words) and the decoder itself
// (under 32 KiB together).
constexpr int64_t kFixedStreamBytes = kMaxGroups * 4 + (64 << 10);
// A lossless image is at most 16384 pixels a side (14 bits); a lossy one 16383.
constexpr int64_t kMaxSide = 16384;

int64_t LosslessStreamBytes(int64_t width, int64_t blocks, int64_t groups) {
  return (groups + kSubImageGroups) * kBytesPerGroup + blocks * kSubImageBytesPerBlock +
         kArgbCacheRows * width * 4 + kFixedStreamBytes;
}

int64_t GroupsBound(int64_t pixels, int64_t blocks, int64_t stream_bytes) {
  const int64_t by_size =
      std::min(kMaxGroups, std::max(blocks, std::min(kMaxGroupsKeptWhole, pixels)));
  const int64_t by_length = stream_bytes * 8 / kMinBitsPerGroup + 1;
  return std::min(by_size, by_length);
}

uint32_t ReadLe32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

// The payload bytes of the ALPH chunks before the "VP8 " chunk (libwebp decodes the
// last one; all are counted), or all of `b` when the chunks do not lead to it.
int64_t AlphaStreamBytes(absl::string_view b) {
  int64_t alpha = 0;
  size_t pos = 12;  // after "RIFF" <size> "WEBP"
  while (pos + 8 <= b.size()) {
    const absl::string_view tag = b.substr(pos, 4);
    if (tag == "VP8 ") return alpha;
    const uint64_t size = ReadLe32(b.data() + pos + 4);
    if (pos + 8 + size > b.size()) break;
    if (tag == "ALPH") alpha += static_cast<int64_t>(size);
    pos += 8 + size + (size & 1);
  }
  return static_cast<int64_t>(b.size());
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
  // libwebp's lossless decoder reads from its VP8L chunk to the end of the data given.
  if (info.lossless) {
    info.lossless_stream_bytes = static_cast<int64_t>(encoded.size());
  } else if (info.alpha) {
    info.lossless_stream_bytes = AlphaStreamBytes(encoded);
  }
  return info;
}

int64_t WebpDecodeBytes(const ImageInfo& info) {
  const int64_t pixels = int64_t{info.width} * info.height;
  int64_t bytes_per_pixel = 3;                                 // the RGB output
  if (info.lossless) bytes_per_pixel += 4;                     // the ARGB image
  if (!info.lossless && info.alpha) bytes_per_pixel += 1 + 4;  // alpha plane + its ARGB decode
  if (!info.lossless && !info.alpha) return pixels * bytes_per_pixel;
  const int64_t blocks = int64_t{(info.width + 3) / 4} * ((info.height + 3) / 4);
  return pixels * bytes_per_pixel +
         LosslessStreamBytes(info.width, blocks,
                             GroupsBound(pixels, blocks, info.lossless_stream_bytes));
}

int64_t MaxWebpDecodeBytes() {
  // The most blocks: ceil(w / 4) * ceil(h / 4) <= (w * h + 3 * (w + h) + 9) / 16.
  const int64_t blocks = (kMaxPixels + 3 * 2 * kMaxSide + 9) / 16 + 1;
  return kMaxPixels * (3 + 1 + 4) + LosslessStreamBytes(kMaxSide, blocks, kMaxGroups);
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
