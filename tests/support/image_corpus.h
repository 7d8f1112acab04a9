// A corpus of real images written by the codecs' own encoders (libjpeg, libpng,
// libwebp): every JPEG sampling factor libjpeg accepts, every PNG bit depth and colour
// type, progressive, restart and interlaced variants, odd sizes. The conformance tests
// compare its decode with PIL + torchvision; the fuzzers take a few as seeds.
#ifndef SHARDCAST_TESTS_SUPPORT_IMAGE_CORPUS_H_
#define SHARDCAST_TESTS_SUPPORT_IMAGE_CORPUS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace shardcast::image_corpus {

// One component's sampling factors (h x v) in a JPEG frame.
struct Sampling {
  int h = 1;
  int v = 1;
};

struct JpegOptions {
  // One entry: greyscale; three: YCbCr from RGB, each component's factors as given
  // (libjpeg allows 1..4 and at most 10 blocks in an interleaved MCU).
  std::vector<Sampling> sampling = {{2, 2}, {1, 1}, {1, 1}};
  bool progressive = false;
  int restart_interval = 0;  // in MCUs; 0 = none
  // Sequential, each component in a scan of its own (non-interleaved): libjpeg then
  // buffers every coefficient of the image, as for a progressive file.
  bool scan_per_component = false;
  int quality = 90;
};

// libjpeg's encoder (jpeglib.h) on `rgb` (w * h * 3 bytes; for greyscale its first
// channel). Returns "" and sets *error when libjpeg refuses the settings.
std::string EncodeJpegWithLibjpeg(const std::vector<uint8_t>& rgb, int w, int h,
                                  const JpegOptions& options, std::string* error);

// What libjpeg's decoder allocates for its whole-image coefficient arrays when it keeps
// them (a progressive file, or a sequential one in several scans; jdcoefct.c): each
// component's blocks rounded up to whole MCU rows and columns, 128 bytes a block. 0 for a
// sequential file in one scan (nothing buffered); -1 when libjpeg cannot read the header.
int64_t LibjpegCoefficientBufferBytes(const std::string& jpeg);

// A JPEG with a zero-length APP0 segment (FF E0 00 00) put right after SOI, which libjpeg
// reads as a segment of no data and steps over: the file still decodes.
std::string WithZeroLengthApp0(const std::string& jpeg);

struct PngOptions {
  int color_type = 2;  // PNG_COLOR_TYPE_*: 0 grey, 2 RGB, 3 palette, 4 grey+alpha, 6 RGBA
  int bit_depth = 8;   // 1, 2, 4, 8, 16 as the colour type allows
  bool trns = false;   // a tRNS chunk (grey, RGB: one colour that occurs; palette: alphas)
  bool interlaced = false;
};

// libpng's encoder on pixels derived from `seed`: samples over the whole range of the
// bit depth (16-bit grey is mostly under 256 and partly over, where PIL clips).
std::string EncodePngWithLibpng(int w, int h, const PngOptions& options, uint32_t seed);

// libwebp's encoder on photo-like pixels, RGB or RGBA.
std::string EncodeWebpWithLibwebp(int w, int h, bool lossless, bool alpha, uint32_t seed);

// Smooth gradients, an edge and noise: what a lossy encoder and a resampler meet.
std::vector<uint8_t> PhotoLikePixels(int w, int h, int channels, uint32_t seed);

struct CorpusFile {
  // With its extension, "jpeg-1x4_1x1_1x1-61x47.jpg", and no other dot: a WebDataset
  // key ends at the first.
  std::string name;
  std::string bytes;
};

// The whole corpus (about 60 files, each a few KB). `small` makes every image at most
// 24x24 (for fuzz seeds).
std::vector<CorpusFile> MakeCorpus(bool small);

}  // namespace shardcast::image_corpus

#endif  // SHARDCAST_TESTS_SUPPORT_IMAGE_CORPUS_H_
