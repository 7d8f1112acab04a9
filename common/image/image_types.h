// The types the stages of the image library pass on (decode, region decode,
// resampling, transforms): a decoded image and what an image's header says. Their own
// header so that those stages include downward, not the library's top
// (image_transform.h).
#ifndef SHARDCAST_COMMON_IMAGE_IMAGE_TYPES_H_
#define SHARDCAST_COMMON_IMAGE_IMAGE_TYPES_H_

#include <cstdint>
#include <vector>

namespace shardcast {

// Decoded image, interleaved RGB (HWC), 8 bits per channel.
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // height * width * 3
};

// The formats decoded, told apart by their content (never by the member's extension).
enum class ImageFormat { kJpeg, kPng, kWebp };

// What the header says, without decoding pixels (ReadImageInfo).
struct ImageInfo {
  int width = 0;
  int height = 0;
  ImageFormat format = ImageFormat::kPng;
  bool cmyk = false;         // JPEG in CMYK/YCCK: decoded with 4 bytes per pixel
  bool progressive = false;  // progressive JPEG: libjpeg keeps every coefficient
  // Sequential JPEG whose components come in more than one scan: libjpeg keeps every
  // coefficient too (its has_multiple_scans), as for a progressive one.
  bool multi_scan = false;
  int components = 3;  // JPEG colour components (1 grey, 3, 4)
  // JPEG: the largest horizontal and vertical sampling factors (1..4); libjpeg pads the
  // coefficient arrays to whole iMCUs, 8 times these.
  int max_h_samp = 2;
  int max_v_samp = 2;
  bool alpha = false;     // WebP with an alpha channel (decoded beside, then dropped)
  bool lossless = false;  // WebP lossless (VP8L), else lossy (VP8)
  // WebP: the bytes libwebp reads as a lossless-coded stream (a lossless image's, from its
  // VP8L chunk to the file's end; the ALPH chunk of a lossy one with alpha), which bound
  // how many entropy codes it can build (WebpDecodeBytes).
  int64_t lossless_stream_bytes = 0;
};

}  // namespace shardcast

#endif  // SHARDCAST_COMMON_IMAGE_IMAGE_TYPES_H_
