// JPEG through libjpeg's own API: the header as the decoder reads it, and
// region-of-interest decoding (only the rows and columns a crop reads go through IDCT,
// upsampling and colour conversion).
#ifndef SHARDCAST_COMMON_IMAGE_JPEG_REGION_DECODE_H_
#define SHARDCAST_COMMON_IMAGE_JPEG_REGION_DECODE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/image/image_decode_internal.h"
#include "common/image/image_types.h"

namespace shardcast {
namespace internal {

// What libjpeg's jpeg_read_header says of a JPEG's frame.
struct JpegFrameHeader {
  int width = 0;
  int height = 0;
  int components = 0;
  bool progressive = false;
  // Sequential, its first scan without every component: more scans follow, and libjpeg
  // buffers the whole image's coefficients as for a progressive file.
  bool multi_scan = false;
  int max_h_samp = 1;  // the largest sampling factors of the frame's components
  int max_v_samp = 1;
  bool cmyk = false;  // CMYK or YCCK (PIL reads both as Adobe-inverted CMYK)
};

// Reads the header of `encoded` with libjpeg's jpeg_read_header: the markers parsed as
// the decode will parse them, so whatever precedes the frame (a zero-length APP0, odd
// APPn segments, fill bytes) cannot hide it, and every sampling factor libjpeg decodes
// is taken (TurboJPEG's tjDecompressHeader3 refuses the ones it has no TJSAMP for: 1x4,
// 3x1, chroma above luma, a full-resolution Cr beside a subsampled Cb, which libjpeg,
// PIL and torchvision decode). A libjpeg warning is an error, as in the decode. Errors
// (INVALID_ARGUMENT, "corrupt JPEG header ..."): not a JPEG libjpeg reads, a colour
// space other than greyscale, YCbCr, RGB, CMYK and YCCK, a size over kMaxPixels.
absl::StatusOr<JpegFrameHeader> ReadJpegFrameHeader(absl::string_view encoded);

// A rectangle of pixels of the image decoded at some DCT scale.
struct PixelRect {
  int x = 0;
  int y = 0;
  int width = 0;
  int height = 0;
};

// Whether DecodeJpegRegion takes `encoded` (whose header says `info`): a sequential JPEG
// in one scan (not progressive, not multi_scan) in YCbCr or greyscale whose last bytes
// are the EOI marker. CMYK/YCCK, progressive and multi-scan JPEGs go through the
// whole-image decode (their coefficient buffer is whole-image anyway, and counted so by
// DecodeBufferBytes), and so does PNG. So does a file that does
// not end with EOI (truncated, or with trailing bytes): the region decode stops after
// the region's last row and would not see the missing end, which the whole-image decode
// refuses ("Premature end of JPEG file").
bool RegionDecodable(const ImageInfo& info, absl::string_view encoded);

// Bytes DecodeJpegRegion allocates for `want` (an upper bound: libjpeg widens the region
// to whole iMCU columns, and the first row is moved up to an iMCU row boundary).
int64_t RegionDecodeBytes(const PixelRect& want, int scaled_width, int scaled_height);

// Decodes the part of `encoded` that covers `want` (coordinates of the image decoded at
// scale `f`, whose size is ScaledSize(width, f) x ScaledSize(height, f)) into `*out`,
// reusing its capacity; `*got` is the decoded rectangle, which contains `want`. The
// pixels inside `want` are bit-identical to the whole-image TurboJPEG decode's (same
// IDCT, fancy upsampling, colour conversion); those of `got` outside it may not be (a
// cropped row's edge column upsamples chroma without its outer neighbour). REQUIRES:
// RegionDecodable(info of `encoded`), `want` non-empty and inside the scaled image.
//
// The untrusted-data limits of the whole-image decode hold: size limit before any
// allocation, more than 500 scans refused (progress hook, as TJFLAG_LIMITSCANS), a
// libjpeg warning is an error (as TJFLAG_STOPONWARNING), and libjpeg's fatal errors
// come back as a Status (never exit()). Rows below the region are not decoded at all,
// so corrupt entropy-coded data there goes unseen (the region's pixels are whole).
absl::Status DecodeJpegRegion(absl::string_view encoded, ScalingFactor f, const PixelRect& want,
                              RgbImage* out, PixelRect* got);

}  // namespace internal
}  // namespace shardcast

#endif  // SHARDCAST_COMMON_IMAGE_JPEG_REGION_DECODE_H_
