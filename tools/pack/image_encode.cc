// JPEG encoding with TurboJPEG (one compressor handle per thread) and PNG
// encoding with libpng's simplified API.
#include "tools/pack/image_encode.h"

#include <png.h>
#include <turbojpeg.h>

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"

namespace shardcast::pack {
namespace {

struct TjDeleter {
  void operator()(void* h) const { tjDestroy(h); }
};

// tjhandles are not thread-safe but are reusable: one per encoding thread.
tjhandle ThreadCompressor() {
  thread_local std::unique_ptr<void, TjDeleter> handle(tjInitCompress());
  return handle.get();
}

absl::Status CheckShape(const uint8_t* rgb, int width, int height) {
  if (rgb == nullptr || width <= 0 || height <= 0 || width > 65535 || height > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot encode a ", width, "x", height, " image"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> EncodeJpeg(const uint8_t* rgb, int width, int height,
                                       const JpegOptions& options) {
  if (absl::Status s = CheckShape(rgb, width, height); !s.ok()) return s;
  if (options.quality < 1 || options.quality > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("JPEG quality ", options.quality, " is not in 1..100"));
  }
  tjhandle tj = ThreadCompressor();
  if (tj == nullptr) return absl::InternalError("tjInitCompress failed");

  const uint8_t* src = rgb;
  int pixel_format = TJPF_RGB;
  int subsamp = TJSAMP_420;
  std::vector<uint8_t> gray;
  switch (options.subsampling) {
    case ChromaSubsampling::k444:
      subsamp = TJSAMP_444;
      break;
    case ChromaSubsampling::k422:
      subsamp = TJSAMP_422;
      break;
    case ChromaSubsampling::k420:
      subsamp = TJSAMP_420;
      break;
    case ChromaSubsampling::kGray: {
      // ITU-R BT.601 luma, as libjpeg computes Y.
      const size_t n = static_cast<size_t>(width) * height;
      gray.resize(n);
      for (size_t i = 0; i < n; ++i) {
        const uint8_t* p = rgb + 3 * i;
        gray[i] = static_cast<uint8_t>((19595 * p[0] + 38470 * p[1] + 7471 * p[2] + 32768) >> 16);
      }
      src = gray.data();
      pixel_format = TJPF_GRAY;
      subsamp = TJSAMP_GRAY;
      break;
    }
  }
  unsigned char* out = nullptr;
  unsigned long out_size = 0;
  const int flags = options.progressive ? TJFLAG_PROGRESSIVE : 0;
  if (tjCompress2(tj, src, width, 0, height, pixel_format, &out, &out_size, subsamp,
                  options.quality, flags) != 0) {
    std::string err = tjGetErrorStr2(tj);
    tjFree(out);
    return absl::InternalError(absl::StrCat("JPEG encode of ", width, "x", height, ": ", err));
  }
  std::string jpeg(reinterpret_cast<const char*>(out), out_size);
  tjFree(out);
  return jpeg;
}

absl::StatusOr<std::string> EncodePng(const uint8_t* rgb, int width, int height) {
  if (absl::Status s = CheckShape(rgb, width, height); !s.ok()) return s;
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&image, nullptr, &size, 0, rgb, 0, nullptr)) {
    std::string err = image.message;
    png_image_free(&image);
    return absl::InternalError(absl::StrCat("PNG encode of ", width, "x", height, ": ", err));
  }
  std::string png(size, '\0');
  if (!png_image_write_to_memory(&image, png.data(), &size, 0, rgb, 0, nullptr)) {
    std::string err = image.message;
    png_image_free(&image);
    return absl::InternalError(absl::StrCat("PNG encode of ", width, "x", height, ": ", err));
  }
  png.resize(size);
  return png;
}

}  // namespace shardcast::pack
