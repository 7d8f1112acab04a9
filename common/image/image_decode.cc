// Encoded bytes -> interleaved RGB: JPEG through TurboJPEG (with DCT-domain
// scaling; the header through libjpeg's own API, jpeg_region_decode.h), PNG through libpng, WebP
// through libwebp (webp_decode.cc); the format is sniffed from the content.
#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <csetjmp>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/image/image_decode_internal.h"
#include "common/image/image_transform.h"
#include "common/image/jpeg_region_decode.h"
#include "common/image/webp_decode.h"

namespace shardcast {
namespace {

using internal::CheckDimensions;
using internal::kMaxPixels;

std::optional<ImageFormat> Sniff(absl::string_view b) {
  if (b.size() >= 3 && static_cast<uint8_t>(b[0]) == 0xFF && static_cast<uint8_t>(b[1]) == 0xD8 &&
      static_cast<uint8_t>(b[2]) == 0xFF) {
    return ImageFormat::kJpeg;
  }
  static constexpr char kPngMagic[] = "\x89PNG\r\n\x1a\n";
  if (b.size() >= 8 && std::memcmp(b.data(), kPngMagic, 8) == 0) return ImageFormat::kPng;
  if (internal::IsWebp(b)) return ImageFormat::kWebp;
  return std::nullopt;
}

// The image formats PIL opens whose magic bytes say what they are, which shardcast does
// not decode (docs/server.md lists them with the reason): named in the error, and the
// error marked so that a server counts them apart from corrupt files.
const char* UnsupportedFormatName(absl::string_view b) {
  const auto starts = [&](absl::string_view magic) {
    return b.size() >= magic.size() && b.substr(0, magic.size()) == magic;
  };
  if (starts("GIF87a") || starts("GIF89a")) return "GIF";
  if (starts("BM") && b.size() >= 26) return "BMP";
  if (starts(absl::string_view("II*\0", 4)) || starts(absl::string_view("MM\0*", 4))) {
    return "TIFF";
  }
  if (starts(absl::string_view("\0\0\1\0", 4)) && b.size() >= 22) return "ICO";
  if (starts(absl::string_view("\0\0\0\x0cjP  \r\n\x87\n", 12)) ||
      starts(absl::string_view("\xff\x4f\xff\x51", 4))) {
    return "JPEG 2000";
  }
  return nullptr;
}

// "not a JPEG, PNG or WebP: 0 bytes" / "... first bytes 47 49 46 38 39 61 ("GIF89a")".
absl::Status UnknownFormatError(absl::string_view b) {
  if (b.empty()) return absl::InvalidArgumentError("not a JPEG, PNG or WebP image: empty content");
  std::string hex, text;
  const size_t n = std::min<size_t>(b.size(), 8);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t c = static_cast<uint8_t>(b[i]);
    absl::StrAppendFormat(&hex, "%s%02x", i ? " " : "", c);  // constexpr format (clang checks)
    text.push_back(c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '.');
  }
  absl::Status error = absl::InvalidArgumentError(absl::StrFormat(
      "not a JPEG (ff d8 ff), PNG (89 50 4e 47) or WebP (RIFF....WEBP) image: %d bytes, first "
      "bytes %s (\"%s\")",
      b.size(), hex, text));
  if (const char* format = UnsupportedFormatName(b); format != nullptr) {
    return internal::MarkUnsupportedFormat(absl::InvalidArgumentError(absl::StrCat(
        "a ", format, " image, a format not decoded (docs/server.md): ", error.message())));
  }
  return error;
}

// The payload that marks a refusal for the image's format (MarkUnsupportedFormat).
constexpr absl::string_view kUnsupportedFormatPayload = "type.shardcast/image.unsupported_format";

// ---------------------------------------------------------------- JPEG

// One decompressor per thread: tjInitDecompress allocates, and a handle is not
// safe to share between threads.
class ThreadDecompressor {
 public:
  ThreadDecompressor() : handle_(tjInitDecompress()) {}
  ~ThreadDecompressor() {
    if (handle_ != nullptr) tjDestroy(handle_);
  }
  ThreadDecompressor(const ThreadDecompressor&) = delete;
  ThreadDecompressor& operator=(const ThreadDecompressor&) = delete;
  tjhandle get() const { return handle_; }
  // libjpeg-turbo 2.1's tjDecompressHeader3 does not abort the decompressor when
  // it bails out on an error, and the next header read on that handle then
  // fails with nonsense ("Bogus DQT index"); a fresh handle after any failure
  // keeps one bad file from poisoning the thread's next ones.
  void Reset() {
    if (handle_ != nullptr) tjDestroy(handle_);
    handle_ = tjInitDecompress();
  }

 private:
  tjhandle handle_;
};

ThreadDecompressor& ThisThreadDecompressor() {
  thread_local ThreadDecompressor decompressor;
  return decompressor;
}

// A fresh handle for every image: a reused one keeps the quantization and Huffman tables
// of its previous image (libjpeg's abbreviated datastreams), and a file without tables
// of its own would then decode with those: output depending on what the thread decoded
// before (found by image_transform_fuzzer). A new handle costs a few small allocations.
absl::StatusOr<tjhandle> Decompressor() {
  ThreadDecompressor& d = ThisThreadDecompressor();
  d.Reset();
  if (d.get() == nullptr) {
    return absl::InternalError(absl::StrCat("tjInitDecompress failed: ", tjGetErrorStr2(nullptr)));
  }
  return d.get();
}

// PIL reads every 4-channel JPEG as Adobe-inverted CMYK ("CMYK;I") and then
// converts with Convert.c's cmyk2rgb; libjpeg hands us the stored (inverted)
// values, so invert and apply the same integer formula to match it exactly.
// In place: RGB output index never passes the CMYK input index.
void InvertedCmykToRgbInPlace(uint8_t* p, size_t pixels) {
  for (size_t i = 0; i < pixels; ++i) {
    const int c = 255 - p[4 * i + 0], m = 255 - p[4 * i + 1], y = 255 - p[4 * i + 2];
    const int nk = p[4 * i + 3];  // 255 - (255 - stored k)
    auto muldiv255 = [](int a, int b) {
      const int t = a * b + 128;
      return ((t >> 8) + t) >> 8;
    };
    p[3 * i + 0] = static_cast<uint8_t>(std::clamp(nk - muldiv255(c, nk), 0, 255));
    p[3 * i + 1] = static_cast<uint8_t>(std::clamp(nk - muldiv255(m, nk), 0, 255));
    p[3 * i + 2] = static_cast<uint8_t>(std::clamp(nk - muldiv255(y, nk), 0, 255));
  }
}

absl::Status DecodeJpeg(absl::string_view b, internal::ScalingFactor f, RgbImage* out) {
  // libjpeg's header read, not TurboJPEG's: tjDecompressHeader3 refuses sampling
  // factors it has no TJSAMP for, which tjDecompress2 (libjpeg underneath) decodes.
  absl::StatusOr<internal::JpegFrameHeader> h = internal::ReadJpegFrameHeader(b);
  if (!h.ok()) return h.status();
  absl::StatusOr<tjhandle> tj = Decompressor();
  if (!tj.ok()) return tj.status();
  const tjscalingfactor sf{f.num, f.denom};
  const int w = TJSCALED(h->width, sf);
  const int ht = TJSCALED(h->height, sf);
  const bool cmyk = h->cmyk;
  const int channels = cmyk ? 4 : 3;
  out->width = w;
  out->height = ht;
  out->pixels.resize(static_cast<size_t>(w) * ht * channels);
  // Warnings (e.g. "Premature end of JPEG file" on a truncated file, whose tail
  // libjpeg fills with grey) are errors: a half-grey image is not the sample, and
  // the server substitutes a failed sample deterministically. STOPONWARNING also
  // saves decoding the rest of a broken file. LIMITSCANS refuses a progressive JPEG
  // with more than 500 scans: each scan re-walks the whole coefficient buffer, so a
  // small file of thousands of scans can hold a decode thread for minutes.
  const int flags = TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS;
  if (tjDecompress2(*tj, reinterpret_cast<const unsigned char*>(b.data()),
                    static_cast<unsigned long>(b.size()), out->pixels.data(), w, w * channels, ht,
                    cmyk ? TJPF_CMYK : TJPF_RGB, flags) != 0) {
    const bool warning = tjGetErrorCode(*tj) == TJERR_WARNING;
    absl::Status error = absl::InvalidArgumentError(absl::StrFormat(
        "JPEG %dx%d (%d bytes) failed to decode%s: %s", h->width, h->height, b.size(),
        warning ? " (libjpeg warning, treated as an error)" : "", tjGetErrorStr2(*tj)));
    ThisThreadDecompressor().Reset();
    return error;
  }
  if (cmyk) {
    InvertedCmykToRgbInPlace(out->pixels.data(), static_cast<size_t>(w) * ht);
    out->pixels.resize(static_cast<size_t>(w) * ht * 3);
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- PNG

struct PngSource {
  const uint8_t* data;
  size_t size;
  size_t pos;
};

struct PngError {
  char message[256];
};

void PngReadFn(png_structp png, png_bytep dst, png_size_t n) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (n > src->size - src->pos) png_error(png, "truncated PNG (read past the end of the data)");
  std::memcpy(dst, src->data + src->pos, n);
  src->pos += n;
}

[[noreturn]] void PngErrorFn(png_structp png, png_const_charp msg) {
  auto* err = static_cast<PngError*>(png_get_error_ptr(png));
  std::snprintf(err->message, sizeof(err->message), "%s", msg);
  png_longjmp(png, 1);
}

void PngWarningFn(png_structp, png_const_charp) {}

// Each row of `image` holds width big-endian 16-bit grey samples in its first 2 * width
// bytes; widens them in place to RGB, each sample clipped at 255 as PIL's "I" -> "RGB".
// From the right: pixel x's 3 bytes land at 3x, never before its own 2 at 2x, and past
// no sample still unread (those lie at 2x' + 1 < 3x for every x' < x).
void ClipGrey16Rows(RgbImage* image) {
  const size_t w = static_cast<size_t>(image->width);
  for (int y = 0; y < image->height; ++y) {
    uint8_t* row = image->pixels.data() + static_cast<size_t>(y) * w * 3;
    for (size_t x = w; x-- > 0;) {
      const unsigned v = (unsigned{row[2 * x]} << 8) | row[2 * x + 1];
      const uint8_t clipped = static_cast<uint8_t>(std::min(v, 255u));
      row[3 * x] = row[3 * x + 1] = row[3 * x + 2] = clipped;
    }
  }
}

// Reads with the low-level libpng API rather than png_image: the simplified API
// applies gAMA and treats 16-bit data as linear, which PIL does not. As PIL's
// .convert("RGB"): palette expanded, grey replicated, alpha and tRNS DROPPED (not
// composited), 16-bit RGB, RGBA and grey+alpha -> high byte (png_set_strip_16, as PIL's
// ";16B" unpackers). 16-bit grey is the exception: PIL opens it as mode "I" (32-bit
// integers, the sample's value) and "I" -> "RGB" clips at 255, so a sample of 300 is 255
// and one of 100 stays 100 (its high byte would be 0): ClipGrey16Rows.
// No C++ objects with destructors live in this frame across png_longjmp.
bool ReadPngPixels(PngSource* src, PngError* err, RgbImage* out) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, err, PngErrorFn, PngWarningFn);
  if (png == nullptr) {
    std::snprintf(err->message, sizeof(err->message), "png_create_read_struct failed");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    std::snprintf(err->message, sizeof(err->message), "png_create_info_struct failed");
    return false;
  }
  std::vector<png_bytep>* volatile rows = nullptr;
  if (setjmp(png_jmpbuf(png))) {
    delete rows;
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  png_set_read_fn(png, src, PngReadFn);
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info);
  const png_uint_32 h = png_get_image_height(png, info);
  if (w == 0 || h == 0 || static_cast<int64_t>(w) * h > kMaxPixels) {
    std::snprintf(err->message, sizeof(err->message), "PNG %ux%u: zero size or over %lld pixels", w,
                  h, static_cast<long long>(kMaxPixels));
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  const int color = png_get_color_type(png, info);
  const bool grey16 = color == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) == 16;
  if (png_get_bit_depth(png, info) == 16 && !grey16) png_set_strip_16(png);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if ((color == PNG_COLOR_TYPE_GRAY && !grey16) || color == PNG_COLOR_TYPE_GRAY_ALPHA) {
    png_set_expand_gray_1_2_4_to_8(png);
    png_set_gray_to_rgb(png);
  }
  // tRNS would become an alpha channel under expansion; PIL's RGB drops it. (16-bit
  // grey is not expanded, so its tRNS stays a chunk that nothing reads.)
  png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  // 16-bit grey is read as it is stored, 2 bytes a pixel, into the first two thirds of
  // each 3-byte-a-pixel row, then widened in place.
  if (png_get_rowbytes(png, info) != static_cast<size_t>(w) * (grey16 ? 2 : 3)) {
    std::snprintf(err->message, sizeof(err->message), "PNG transforms gave %zu bytes per row",
                  static_cast<size_t>(png_get_rowbytes(png, info)));
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  out->width = static_cast<int>(w);
  out->height = static_cast<int>(h);
  out->pixels.resize(static_cast<size_t>(w) * h * 3);
  rows = new std::vector<png_bytep>(h);
  for (png_uint_32 y = 0; y < h; ++y)
    (*rows)[y] = out->pixels.data() + static_cast<size_t>(y) * w * 3;
  png_read_image(png, rows->data());
  png_read_end(png, nullptr);
  if (grey16) ClipGrey16Rows(out);
  delete rows;
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

absl::Status DecodePng(absl::string_view b, RgbImage* out) {
  PngSource src{reinterpret_cast<const uint8_t*>(b.data()), b.size(), 0};
  PngError err{};
  if (!ReadPngPixels(&src, &err, out)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("PNG (%d bytes) failed to decode: %s", b.size(), err.message));
  }
  return absl::OkStatus();
}

// IHDR is the first chunk: width and height big-endian at bytes 16..23.
absl::StatusOr<ImageInfo> ReadPngInfo(absl::string_view b) {
  if (b.size() < 24 || std::memcmp(b.data() + 12, "IHDR", 4) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("corrupt PNG header (%d bytes): no IHDR chunk", b.size()));
  }
  auto be32 = [&](size_t at) {
    const auto* p = reinterpret_cast<const uint8_t*>(b.data()) + at;
    return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
  };
  const uint32_t w = be32(16), h = be32(20);
  if (w > 0x7fffffff || h > 0x7fffffff) {
    return absl::InvalidArgumentError(absl::StrFormat("corrupt PNG header: %ux%u", w, h));
  }
  if (absl::Status s = CheckDimensions(w, h, "PNG"); !s.ok()) return s;
  ImageInfo info;
  info.width = static_cast<int>(w);
  info.height = static_cast<int>(h);
  info.format = ImageFormat::kPng;
  return info;
}

}  // namespace

namespace internal {

absl::Status MarkUnsupportedFormat(absl::Status status) {
  status.SetPayload(kUnsupportedFormatPayload, absl::Cord("1"));
  return status;
}

absl::Status CheckDimensions(int64_t w, int64_t h, const char* what) {
  if (w <= 0 || h <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat("%s has zero size (%dx%d)", what, w, h));
  }
  if (w * h > kMaxPixels) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s is %dx%d = %d pixels, over the %d pixel limit", what, w, h, w * h, kMaxPixels));
  }
  return absl::OkStatus();
}

int ScaledSize(int size, ScalingFactor f) {
  const tjscalingfactor sf{f.num, f.denom};
  return TJSCALED(size, sf);
}

// Only the power-of-two factors (1/2, 1/4, 1/8): libjpeg-turbo has SIMD
// reduced-size IDCTs for those, while 7/8, 3/4, 5/8, 3/8 use scalar IDCTs that
// are slower than the full-size SIMD decode (measured in bench/decode_bench; see
// docs/BENCHMARKS.md), so "smaller" would not mean "faster" there.
ScalingFactor ChooseScalingFactor(const std::function<bool(ScalingFactor)>& acceptable) {
  ScalingFactor best;
  for (int denom : {2, 4, 8}) {
    const ScalingFactor f{1, denom};
    if (!acceptable(f)) break;
    best = f;
  }
  return best;
}

absl::Status DecodeInto(absl::string_view encoded, ScalingFactor f, RgbImage* out) {
  const std::optional<ImageFormat> format = Sniff(encoded);
  if (!format.has_value()) return UnknownFormatError(encoded);
  switch (*format) {
    case ImageFormat::kJpeg:
      return DecodeJpeg(encoded, f, out);
    case ImageFormat::kPng:
      return DecodePng(encoded, out);
    case ImageFormat::kWebp:
      return DecodeWebp(encoded, out);
  }
  return UnknownFormatError(encoded);
}

}  // namespace internal

bool IsUnsupportedImageFormat(const absl::Status& status) {
  return status.GetPayload(kUnsupportedFormatPayload).has_value();
}

absl::StatusOr<ImageInfo> ReadImageInfo(absl::string_view encoded) {
  const std::optional<ImageFormat> format = Sniff(encoded);
  if (!format.has_value()) return UnknownFormatError(encoded);
  switch (*format) {
    case ImageFormat::kJpeg: {
      // The frame as libjpeg reads it, whatever segments precede it: a progressive
      // frame is never missed, so its coefficient buffer is always counted.
      absl::StatusOr<internal::JpegFrameHeader> h = internal::ReadJpegFrameHeader(encoded);
      if (!h.ok()) return h.status();
      ImageInfo info;
      info.width = h->width;
      info.height = h->height;
      info.format = ImageFormat::kJpeg;
      info.cmyk = h->cmyk;
      info.progressive = h->progressive;
      info.multi_scan = h->multi_scan;
      info.max_h_samp = h->max_h_samp;
      info.max_v_samp = h->max_v_samp;
      info.components = h->components;
      return info;
    }
    case ImageFormat::kPng:
      return ReadPngInfo(encoded);
    case ImageFormat::kWebp:
      return internal::ReadWebpInfo(encoded);
  }
  return UnknownFormatError(encoded);
}

int64_t DecodeBufferBytes(const ImageInfo& info, int scale_num, int scale_denom) {
  switch (info.format) {
    case ImageFormat::kJpeg:
      break;
    case ImageFormat::kPng:
      // Pixels plus libpng's row pointer array.
      return int64_t{info.width} * info.height * 3 + int64_t{info.height} * sizeof(void*);
    case ImageFormat::kWebp:
      return internal::WebpDecodeBytes(info);
  }
  const internal::ScalingFactor f{scale_num, scale_denom};
  const int64_t w = internal::ScaledSize(info.width, f);
  const int64_t h = internal::ScaledSize(info.height, f);
  int64_t bytes = w * h * (info.cmyk ? 4 : 3);
  if (info.progressive || info.multi_scan) {
    // Whole-image coefficient arrays at full resolution; every component counted at full
    // resolution (an upper bound for subsampled ones), its blocks padded to whole iMCUs
    // (8 x the largest sampling factor, up to 32 pixels for factors of 4; at least 16,
    // as before the sampling was read), 2 bytes per coefficient.
    const auto round_up = [](int64_t v, int64_t to) { return (v + to - 1) / to * to; };
    const int64_t imcu_w = std::max(16, 8 * info.max_h_samp);
    const int64_t imcu_h = std::max(16, 8 * info.max_v_samp);
    bytes +=
        int64_t{info.components} * round_up(info.width, imcu_w) * round_up(info.height, imcu_h) * 2;
  }
  return bytes;
}

absl::StatusOr<RgbImage> DecodeImage(absl::string_view encoded, const DecodeOptions& options) {
  internal::ScalingFactor f;
  if ((options.min_width > 0 || options.min_height > 0) && Sniff(encoded) == ImageFormat::kJpeg) {
    absl::StatusOr<ImageInfo> info = ReadImageInfo(encoded);
    if (!info.ok()) return info.status();
    f = internal::ChooseScalingFactor([&](internal::ScalingFactor s) {
      return internal::ScaledSize(info->width, s) >= options.min_width &&
             internal::ScaledSize(info->height, s) >= options.min_height;
    });
  }
  RgbImage image;
  if (absl::Status s = internal::DecodeInto(encoded, f, &image); !s.ok()) return s;
  return image;
}

}  // namespace shardcast
