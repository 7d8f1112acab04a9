// A JPEG cut losslessly (coefficients copied, never re-quantized) to the part of it a
// crop reads: what the server sends in encoded delivery for a random crop, so that
// fewer bytes cross the wire and the client decodes fewer pixels.
#ifndef SHARDCAST_COMMON_IMAGE_JPEG_LOSSLESS_CUT_H_
#define SHARDCAST_COMMON_IMAGE_JPEG_LOSSLESS_CUT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/image/image_transform.h"
#include "common/image/image_types.h"

namespace shardcast {

struct LosslessCut {
  std::string bytes;    // a baseline JPEG of window.width x window.height
  SourceWindow window;  // where the cut lies in the stored image (proto EncodedImage.cut_*)
};

// Cuts `jpeg` (whose header says `info`, ReadImageInfo) to the window that holds
// `needed` (SourcePixelsRead of the crop) plus one iMCU on every side, clamped to the
// image, its left and top on the iMCU grid. The margin is for the decode, not the crop:
// fancy chroma upsampling reads the neighbouring chroma sample, which the cut's own
// edge replaces with a copy of its last one. So DecodeWithCrop(cut.bytes, crop, dct,
// out, admission, &cut.window) makes the bytes DecodeWithCrop(jpeg, crop, dct, out)
// makes (tests/common/jpeg_lossless_cut_test.cc proves it over every subsampling,
// progressive and CMYK files, DCT scaling on and off).
//
// Untrusted data, read with the decoder's limits: a libjpeg warning is an error, as is
// a progressive file of more than 500 scans. Reading allocates the whole image's DCT
// coefficients (LosslessCutBytes), so a caller bounds that first. Markers other than the
// colour space's (JFIF, Adobe, which libjpeg writes from the colour space it read) are
// dropped: EXIF, ICC and comments change no decoded pixel here and only cost wire bytes.
//
// Errors, after which a caller sends the stored bytes: INVALID_ARGUMENT for input the
// cut cannot take (not a JPEG, corrupt data, a DCT coefficient beyond what 8-bit samples
// make, which TurboJPEG's encoder would write wrongly, a subsampling TurboJPEG does not
// name, an iMCU grid other than the subsampling's, `needed` outside the image);
// FAILED_PRECONDITION when the window is the whole image (nothing to cut), or for a
// progressive JPEG whose scans leave some coefficient unrefined (a file that stops
// early): libjpeg's decode of it smooths those blocks, its cut's decode would not; and
// for a file whose markers that check cannot follow (a zero-length segment, bytes
// between markers), which no encoder writes.
absl::StatusOr<LosslessCut> CutJpegLosslessly(absl::string_view jpeg, const ImageInfo& info,
                                              const SourceRect& needed);

// An upper bound of the bytes CutJpegLosslessly allocates for an image whose header says
// `info`: every DCT coefficient of the whole image (2 bytes each; each component counted
// at full resolution), which a server holds against its decode memory budget.
int64_t LosslessCutBytes(const ImageInfo& info);

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_IMAGE_JPEG_LOSSLESS_CUT_H_
