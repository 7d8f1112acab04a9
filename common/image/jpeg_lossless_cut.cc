// TurboJPEG's lossless crop (tjTransform, TJXOPT_CROP) to a crop's window plus one
// iMCU of margin.
#include "common/image/jpeg_lossless_cut.h"

#include <turbojpeg.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
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
  Transformer tj;
  if (tj.get() == nullptr) {
    return absl::InternalError(
        absl::StrFormat("tjInitTransform failed: %s", tjGetErrorStr2(nullptr)));
  }
  absl::StatusOr<TjHeader> header = ReadHeader(tj.get(), jpeg, "lossless cut");
  if (!header.ok()) return header.status();
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
  TjBuffer out;
  // As the decoder reads untrusted files: a warning (corrupt data, a truncated file)
  // fails the cut, and so does a progressive file of more than 500 scans.
  const int flags = TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS;
  if (tjTransform(tj.get(), reinterpret_cast<const unsigned char*>(jpeg.data()),
                  static_cast<unsigned long>(jpeg.size()), 1, out.out(), out.size(), &transform,
                  flags) != 0) {
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
