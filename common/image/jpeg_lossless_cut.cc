// TurboJPEG's lossless crop (tjTransform, TJXOPT_CROP) to a crop's window plus one
// iMCU of margin.
#include "common/image/jpeg_lossless_cut.h"

#include <turbojpeg.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace shardcast {
namespace {

// A fresh transformer for every image: a reused handle keeps the Huffman and
// quantization tables of its previous image, which a file without its own would then
// borrow (as image_decode.cc's fresh decompressor per image avoids).
class Transformer {
 public:
  Transformer() : handle_(tjInitTransform()) {}
  ~Transformer() {
    if (handle_ != nullptr) tjDestroy(handle_);
  }
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;
  tjhandle get() const { return handle_; }

 private:
  tjhandle handle_;
};

// Owns a buffer TurboJPEG allocated.
class TjBuffer {
 public:
  TjBuffer() = default;
  ~TjBuffer() { tjFree(data_); }
  TjBuffer(const TjBuffer&) = delete;
  TjBuffer& operator=(const TjBuffer&) = delete;
  unsigned char** out() { return &data_; }
  unsigned long* size() { return &size_; }
  absl::string_view view() const {
    return absl::string_view(reinterpret_cast<const char*>(data_), size_);
  }

 private:
  unsigned char* data_ = nullptr;
  unsigned long size_ = 0;
};

struct TjHeader {
  int width = 0;
  int height = 0;
  int subsamp = 0;
  int colorspace = 0;
};

absl::StatusOr<TjHeader> ReadHeader(tjhandle tj, absl::string_view jpeg, const char* what) {
  TjHeader h;
  if (tjDecompressHeader3(tj, reinterpret_cast<const unsigned char*>(jpeg.data()),
                          static_cast<unsigned long>(jpeg.size()), &h.width, &h.height, &h.subsamp,
                          &h.colorspace) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: corrupt JPEG header: %s", what, tjGetErrorStr2(tj)));
  }
  return h;
}

// Whether the cut of `b` decodes as `b` does, as far as its frame and scans tell: a
// sequential JPEG, or a progressive one whose every coefficient of every component is
// refined to full precision (some scan with Al = 0 covers it). When one is not, libjpeg's
// decode smooths the blocks (block smoothing estimates the missing AC coefficients), and
// a cut, whose baseline copy declares its coefficients complete, would decode without
// it. Walks the markers (and a progressive file's entropy-coded data, to the next
// marker); a file it cannot parse is not cut (a zero-length segment, bytes between
// markers: libjpeg, which reads the decoder's header, steps over them, this walk does not),
// so no segment can hide a progressive frame from this check.
bool ScansAllowACut(absl::string_view b) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(b[i]); };
  constexpr int kMaxComponents = 4;
  int component_ids[kMaxComponents] = {};
  int components = 0;
  bool refined[kMaxComponents][64] = {};
  size_t pos = 2;  // after SOI
  while (pos + 4 <= b.size()) {
    if (byte(pos) != 0xFF) return false;
    const uint8_t marker = byte(pos + 1);
    if (marker == 0xFF) {  // fill byte
      ++pos;
      continue;
    }
    if (marker == 0xD9) break;  // EOI
    const size_t length = (size_t{byte(pos + 2)} << 8) | byte(pos + 3);
    const size_t segment = pos + 4;  // the segment's bytes after its length
    if (length < 2 || pos + 2 + length > b.size()) return false;
    const size_t end = pos + 2 + length;
    if (marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 &&
        marker != 0xCC) {  // SOF
      const bool progressive = marker == 0xC2 || marker == 0xC6 || marker == 0xCA || marker == 0xCE;
      if (!progressive) return components == 0;  // sequential, and the first frame
      if (components != 0 || length < 8) return false;
      components = byte(segment + 5);
      if (components < 1 || components > kMaxComponents ||
          length < 8 + 3 * static_cast<size_t>(components)) {
        return false;
      }
      for (int c = 0; c < components; ++c) component_ids[c] = byte(segment + 6 + 3 * c);
    } else if (marker == 0xDA) {  // SOS: components, then Ss, Se, Ah/Al
      if (components == 0 || length < 6) return false;
      const int in_scan = byte(segment);
      if (in_scan < 1 || length != 6 + 2 * static_cast<size_t>(in_scan)) return false;
      const int ss = byte(segment + 1 + 2 * in_scan), se = byte(segment + 2 + 2 * in_scan);
      const int al = byte(segment + 3 + 2 * in_scan) & 15;
      if (ss > se || se > 63) return false;
      for (int i = 0; i < in_scan; ++i) {
        const int id = byte(segment + 1 + 2 * i);
        const int* c = std::find(component_ids, component_ids + components, id);
        if (c == component_ids + components) return false;
        for (int k = ss; k <= se && al == 0; ++k) refined[c - component_ids][k] = true;
      }
      // The entropy-coded data runs to the next marker that is not a stuffed 0xFF00 or
      // a restart marker.
      pos = end;
      while (pos + 1 < b.size() && !(byte(pos) == 0xFF && byte(pos + 1) != 0x00 &&
                                     !(byte(pos + 1) >= 0xD0 && byte(pos + 1) <= 0xD7))) {
        ++pos;
      }
      continue;
    }
    pos = end;
  }
  if (components == 0) return false;
  for (int c = 0; c < components; ++c) {
    for (int k = 0; k < 64; ++k) {
      if (!refined[c][k]) return false;
    }
  }
  return true;
}

// libjpeg-turbo's Huffman encoder does not check an AC coefficient's size: one over
// MAX_COEF_BITS (10 bits, what 8-bit samples can make) gets a code the standard tables do
// not have, and the cut decodes to other pixels, silently. A hostile file's coefficients
// can be that big (its Huffman codes can say up to 15 bits), so the cut's are checked,
// as tjTransform hands them over before encoding, and an out-of-range one refuses the
// cut. `coeffs` holds whole blocks of 64 (DC first); transform->data points to a bool set
// on refusal.
int RefuseOutOfRangeCoefficients(short* coeffs, tjregion array_region, tjregion /*plane*/,
                                 int /*component*/, int /*transform_index*/,
                                 tjtransform* transform) {
  constexpr int kMaxDc = 1024;  // 8 x (0 - 128) at quantizer 1
  constexpr int kMaxAc = 1023;  // 10 bits
  const int64_t blocks = int64_t{array_region.w} * array_region.h / 64;
  for (int64_t b = 0; b < blocks; ++b) {
    const short* block = coeffs + b * 64;
    bool in_range = block[0] >= -kMaxDc && block[0] <= kMaxDc;
    for (int k = 1; k < 64; ++k) in_range &= block[k] >= -kMaxAc && block[k] <= kMaxAc;
    if (!in_range) {
      *static_cast<bool*>(transform->data) = true;
      return -1;
    }
  }
  return 0;
}

int AlignDown(int v, int step) { return v / step * step; }

// The cut's window: `needed` widened by one iMCU (mcu_w x mcu_h) on each side, clamped
// to the width x height image, left and top moved down onto the iMCU grid.
SourceWindow CutWindow(const SourceRect& needed, int width, int height, int mcu_w, int mcu_h) {
  const int left = AlignDown(std::max(needed.left - mcu_w, 0), mcu_w);
  const int top = AlignDown(std::max(needed.top - mcu_h, 0), mcu_h);
  const int right =
      static_cast<int>(std::min<int64_t>(int64_t{needed.left} + needed.width + mcu_w, width));
  const int bottom =
      static_cast<int>(std::min<int64_t>(int64_t{needed.top} + needed.height + mcu_h, height));
  return SourceWindow{left, top, right - left, bottom - top};
}

}  // namespace

int64_t LosslessCutBytes(const ImageInfo& info) {
  // Blocks cover the image padded to the iMCU (at most 32 pixels more each way).
  return (int64_t{info.width} + 32) * (int64_t{info.height} + 32) * std::max(info.components, 1) *
         2;
}

absl::StatusOr<LosslessCut> CutJpegLosslessly(absl::string_view jpeg, const ImageInfo& info,
                                              const SourceRect& needed) {
  if (info.format != ImageFormat::kJpeg) {
    return absl::InvalidArgumentError("only a JPEG can be cut losslessly");
  }
  if (needed.width <= 0 || needed.height <= 0 || needed.left < 0 || needed.top < 0 ||
      int64_t{needed.left} + needed.width > info.width ||
      int64_t{needed.top} + needed.height > info.height) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the rectangle %dx%d at (%d, %d) is not inside the %dx%d image", needed.width,
        needed.height, needed.left, needed.top, info.width, info.height));
  }
  if (!ScansAllowACut(jpeg)) {
    return absl::FailedPreconditionError(
        "lossless cut: a progressive JPEG whose scans leave coefficients unrefined (libjpeg's "
        "decode smooths them, a cut's would not), or markers the check cannot follow");
  }
  Transformer tj;
  if (tj.get() == nullptr) {
    return absl::InternalError(
        absl::StrFormat("tjInitTransform failed: %s", tjGetErrorStr2(nullptr)));
  }
  absl::StatusOr<TjHeader> header = ReadHeader(tj.get(), jpeg, "lossless cut");
  if (!header.ok()) {
    // The decoder read this header (libjpeg's own, ReadJpegFrameHeader); TurboJPEG's
    // refuses the samplings it has no TJSAMP for, whose iMCU tjTransform does not know.
    return absl::InvalidArgumentError(absl::StrCat(
        header.status().message(),
        " (a sampling TurboJPEG does not name is not cut: the stored bytes are sent)"));
  }
  if (header->width != info.width || header->height != info.height) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the JPEG is %dx%d, its header was read as %dx%d", header->width,
                        header->height, info.width, info.height));
  }
  if (header->subsamp < 0 || header->subsamp >= TJ_NUMSAMP) {
    return absl::InvalidArgumentError(
        "lossless cut: a chroma subsampling TurboJPEG does not name (its iMCU is unknown)");
  }
  const SourceWindow window = CutWindow(needed, info.width, info.height,
                                        tjMCUWidth[header->subsamp], tjMCUHeight[header->subsamp]);
  if (window.width == info.width && window.height == info.height) {
    return absl::FailedPreconditionError(
        "lossless cut: the crop reads (nearly) the whole image, nothing to cut");
  }

  tjtransform transform{};
  transform.r = tjregion{window.left, window.top, window.width, window.height};
  transform.op = TJXOP_NONE;
  transform.options = TJXOPT_CROP | TJXOPT_COPYNONE;
  bool out_of_range = false;
  transform.data = &out_of_range;
  transform.customFilter = RefuseOutOfRangeCoefficients;
  TjBuffer out;
  // As the decoder reads untrusted files: a warning (corrupt data, a truncated file)
  // fails the cut, and so does a progressive file of more than 500 scans.
  const int flags = TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS;
  if (tjTransform(tj.get(), reinterpret_cast<const unsigned char*>(jpeg.data()),
                  static_cast<unsigned long>(jpeg.size()), 1, out.out(), out.size(), &transform,
                  flags) != 0) {
    if (out_of_range) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "lossless cut of a %dx%d JPEG: a DCT coefficient beyond what 8-bit samples make "
          "(corrupt or hostile entropy-coded data), which the encoder cannot copy",
          info.width, info.height));
    }
    return absl::InvalidArgumentError(absl::StrFormat(
        "lossless cut of a %dx%d JPEG (%d bytes) failed%s: %s", info.width, info.height,
        jpeg.size(),
        tjGetErrorCode(tj.get()) == TJERR_WARNING ? " (libjpeg warning, treated as an error)" : "",
        tjGetErrorStr2(tj.get())));
  }
  // libjpeg moves a crop's corner down onto its own iMCU grid, which for sampling
  // factors written unusually is not the subsampling's: the cut would then lie
  // elsewhere than `window` says.
  absl::StatusOr<TjHeader> cut = ReadHeader(tj.get(), out.view(), "the cut");
  if (!cut.ok()) return cut.status();
  if (cut->width != window.width || cut->height != window.height) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "lossless cut: asked for %dx%d at (%d, %d), libjpeg made %dx%d (an iMCU grid other "
        "than the subsampling's)",
        window.width, window.height, window.left, window.top, cut->width, cut->height));
  }
  return LosslessCut{std::string(out.view()), window};
}

}  // namespace shardcast
