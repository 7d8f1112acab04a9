// Test helpers for the image tests: photo-like pixels, real JPEG/PNG/WebP encoding
// (TurboJPEG, libpng, libwebp), temp dirs and running the Python reference scripts.
#ifndef SHARDCAST_TESTS_COMMON_IMAGE_TEST_UTIL_H_
#define SHARDCAST_TESTS_COMMON_IMAGE_TEST_UTIL_H_

#include <png.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <turbojpeg.h>
#include <webp/encode.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/child_process.h"
#include "tests/support/temp_dir.h"

namespace shardcast::testing_util {

// Smooth gradients + a few shapes + noise, like a photo as far as JPEG cares.
inline std::vector<uint8_t> PhotoLike(int w, int h, uint32_t seed, int channels = 3) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, 6.0);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double cx = u(rng) * w, cy = u(rng) * h, rad = (0.2 + 0.3 * u(rng)) * std::min(w, h);
  const double phase = u(rng) * 6.28;
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * channels);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const bool in_disc = (x - cx) * (x - cx) + (y - cy) * (y - cy) < rad * rad;
      const bool in_bar = ((x / 23 + y / 31) % 7) == 0;
      for (int c = 0; c < channels; ++c) {
        double v = 128 + 90 * std::sin(phase + c + 3.0 * x / w + 2.0 * y / h) +
                   25 * std::cos(0.05 * x * (c + 1) + 0.03 * y);
        if (in_disc) v = 0.6 * v + 90 * c;
        if (in_bar) v = 255 - v;
        v += noise(rng);
        px[(static_cast<size_t>(y) * w + x) * channels + c] =
            static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
      }
    }
  }
  return px;
}

// tjCompress2 into a std::string. pixel_format TJPF_RGB or TJPF_CMYK (or TJPF_GRAY).
inline std::string EncodeJpeg(const std::vector<uint8_t>& px, int w, int h, int subsamp,
                              int quality = 90, int flags = 0, int pixel_format = TJPF_RGB) {
  tjhandle tj = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  const int pitch = w * tjPixelSize[pixel_format];
  const int rc =
      tjCompress2(tj, px.data(), w, pitch, h, pixel_format, &buf, &size, subsamp, quality, flags);
  std::string out;
  if (rc == 0)
    out.assign(reinterpret_cast<char*>(buf), size);
  else
    ADD_FAILURE() << "tjCompress2: " << tjGetErrorStr2(tj);
  tjFree(buf);
  tjDestroy(tj);
  return out;
}

// libpng writer into a std::string. color_type PNG_COLOR_TYPE_*, bit_depth 8/16;
// `samples` holds channels-per-pixel values (16-bit: big-endian pairs) or palette indices.
inline std::string EncodePng(const std::vector<uint8_t>& samples, int w, int h, int color_type,
                             int bit_depth, const std::vector<png_color>& palette = {},
                             const std::vector<uint8_t>& trns = {}, bool interlaced = false) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  std::string out;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    ADD_FAILURE() << "libpng write failed";
    return "";
  }
  png_set_write_fn(
      png, &out,
      [](png_structp p, png_bytep data, png_size_t n) {
        static_cast<std::string*>(png_get_io_ptr(p))->append(reinterpret_cast<char*>(data), n);
      },
      nullptr);
  png_set_IHDR(png, info, w, h, bit_depth, color_type,
               interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (!palette.empty()) png_set_PLTE(png, info, palette.data(), static_cast<int>(palette.size()));
  if (!trns.empty()) {
    png_set_tRNS(png, info, trns.data(), static_cast<int>(trns.size()), nullptr);
  }
  png_write_info(png, info);
  const size_t row_bytes = png_get_rowbytes(png, info);
  std::vector<png_bytep> rows(h);
  for (int y = 0; y < h; ++y) {
    rows[y] = const_cast<png_bytep>(samples.data() + static_cast<size_t>(y) * row_bytes);
  }
  png_write_image(png, rows.data());  // handles the Adam7 passes
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

// libwebp's encoder into a std::string: `px` holds `channels` (3 RGB, 4 RGBA) values per
// pixel. `exact` keeps the RGB under fully transparent pixels (the encoder's default
// clears it), so a lossless file holds exactly `px`.
inline std::string EncodeWebp(const std::vector<uint8_t>& px, int w, int h, int channels,
                              bool lossless, float quality = 90, bool exact = true) {
  WebPConfig config;
  WebPPicture picture;
  if (!WebPConfigInit(&config) || !WebPPictureInit(&picture)) {
    ADD_FAILURE() << "libwebp: config/picture init failed";
    return "";
  }
  config.lossless = lossless ? 1 : 0;
  config.quality = quality;
  config.exact = exact ? 1 : 0;
  picture.use_argb = lossless ? 1 : 0;
  picture.width = w;
  picture.height = h;
  const int ok = channels == 4 ? WebPPictureImportRGBA(&picture, px.data(), w * 4)
                               : WebPPictureImportRGB(&picture, px.data(), w * 3);
  WebPMemoryWriter writer;
  WebPMemoryWriterInit(&writer);
  picture.writer = WebPMemoryWrite;
  picture.custom_ptr = &writer;
  std::string out;
  if (ok && WebPEncode(&config, &picture)) {
    out.assign(reinterpret_cast<const char*>(writer.mem), writer.size);
  } else {
    ADD_FAILURE() << "WebPEncode failed: error " << picture.error_code;
  }
  WebPMemoryWriterClear(&writer);
  WebPPictureFree(&picture);
  return out;
}

inline void WriteFile(const std::string& path, const void* data, size_t n) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
}

// Runs `cmd`, returning its exit status and stdout+stderr.
inline int RunCommand(const std::string& cmd, std::string* output) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  size_t n;
  output->clear();
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) output->append(buf, n);
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// True when REFERENCE_PYTHON can import `module`.
inline bool PythonHas(const std::string& module) {
  std::string out;
  return RunCommand(std::string(REFERENCE_PYTHON) + " -c 'import " + module + "'", &out) == 0;
}

inline std::string ReferenceScript(const std::string& name) {
  return std::string(SHARDCAST_SOURCE_DIR) + "/tests/reference/" + name;
}

// Runs PIL on `encoded` (written to a file named `name`) and returns its
// Image.open(...).convert("RGB") pixels, with its size in *w, *h.
inline std::vector<uint8_t> PilDecode(const std::string& encoded, const std::string& name, int* w,
                                      int* h) {
  TempDir dir;
  const std::string in = dir.path() + "/" + name, out = dir.path() + "/out.rgb";
  WriteFile(in, encoded.data(), encoded.size());
  std::string log;
  const int rc = RunCommand(
      std::string(REFERENCE_PYTHON) + " " + ReferenceScript("pil_decode.py") + " " + in + " " + out,
      &log);
  EXPECT_EQ(rc, 0) << log;
  std::sscanf(log.c_str(), "%d %d", w, h);
  const std::string raw = ReadWholeFile(out);
  return std::vector<uint8_t>(raw.begin(), raw.end());
}

}  // namespace shardcast::testing_util

#endif  // SHARDCAST_TESTS_COMMON_IMAGE_TEST_UTIL_H_
