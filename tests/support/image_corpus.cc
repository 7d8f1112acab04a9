// The image corpus of image_corpus.h: each file written by the codec's own encoder, so
// the decoders meet what real encoders write, in every variant those encoders offer.
#include "tests/support/image_corpus.h"

#include <png.h>
#include <webp/encode.h>

// jpeglib.h needs size_t and FILE declared first.
#include <cstddef>
#include <cstdio>
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdlib>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace shardcast::image_corpus {
namespace {

struct JpegErrorManager {
  jpeg_error_mgr pub;  // first: libjpeg casts cinfo->err to this
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void JpegErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// The libjpeg calls between one setjmp and libjpeg's longjmps: nothing with a destructor
// lives in this frame. Returns false with err->message set.
bool CompressJpeg(jpeg_compress_struct* cinfo, JpegErrorManager* err, const uint8_t* rgb, int w,
                  int h, const JpegOptions& options, unsigned char** out, unsigned long* size,
                  std::vector<uint8_t>* row) {
  if (setjmp(err->jump) != 0) return false;
  jpeg_create_compress(cinfo);
  jpeg_mem_dest(cinfo, out, size);
  const bool grey = options.sampling.size() == 1;
  cinfo->image_width = static_cast<JDIMENSION>(w);
  cinfo->image_height = static_cast<JDIMENSION>(h);
  cinfo->input_components = grey ? 1 : 3;
  cinfo->in_color_space = grey ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(cinfo);
  jpeg_set_quality(cinfo, options.quality, TRUE);
  for (size_t c = 0; c < options.sampling.size() && c < 3; ++c) {
    cinfo->comp_info[c].h_samp_factor = options.sampling[c].h;
    cinfo->comp_info[c].v_samp_factor = options.sampling[c].v;
  }
  if (options.progressive) jpeg_simple_progression(cinfo);
  jpeg_scan_info scans[3] = {};  // lives until jpeg_finish_compress, in this frame
  if (options.scan_per_component && !options.progressive) {
    for (int c = 0; c < cinfo->num_components && c < 3; ++c) {
      scans[c].comps_in_scan = 1;
      scans[c].component_index[0] = c;
      scans[c].Ss = 0;
      scans[c].Se = 63;
    }
    cinfo->scan_info = scans;
    cinfo->num_scans = std::min(cinfo->num_components, 3);
  }
  cinfo->restart_interval = static_cast<unsigned int>(options.restart_interval);
  jpeg_start_compress(cinfo, TRUE);
  row->resize(static_cast<size_t>(w) * 3);
  while (cinfo->next_scanline < cinfo->image_height) {
    const uint8_t* src = rgb + static_cast<size_t>(cinfo->next_scanline) * w * 3;
    for (int x = 0; x < w; ++x) {
      if (grey) {
        (*row)[x] = src[3 * x];
      } else {
        std::copy(src + 3 * x, src + 3 * x + 3, row->data() + 3 * x);
      }
    }
    JSAMPROW rows[1] = {row->data()};
    jpeg_write_scanlines(cinfo, rows, 1);
  }
  jpeg_finish_compress(cinfo);
  return true;
}

// Pixels of every bit depth from one 8-bit photo-like plane: the top bits for depths
// under 8, the full 16-bit range otherwise (the photo's byte twice, plus low-byte noise),
// except 16-bit grey, which mostly stays under 256 (0..300): PIL reads it as 32-bit
// integers and clips at 255, so that is where a decoder keeping the high byte goes wrong.
uint16_t SampleOfDepth(uint8_t v8, int depth, bool grey16_low, uint32_t noise) {
  if (depth < 8) return static_cast<uint16_t>(v8 >> (8 - depth));
  if (depth == 8) return v8;
  if (grey16_low) return static_cast<uint16_t>(v8 * 300 / 255);
  const int v = v8 * 257 + static_cast<int>(noise % 97) - 48;
  return static_cast<uint16_t>(std::clamp(v, 0, 65535));
}

}  // namespace

std::vector<uint8_t> PhotoLikePixels(int w, int h, int channels, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, 6.0);
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * channels);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < channels; ++c) {
        double v = 128 + 90 * std::sin(seed + c + 3.0 * x / w + 2.0 * y / h) +
                   40 * ((x + y) % 37 < 9) + noise(rng);
        px[(static_cast<size_t>(y) * w + x) * channels + c] =
            static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
      }
    }
  }
  return px;
}

std::string EncodeJpegWithLibjpeg(const std::vector<uint8_t>& rgb, int w, int h,
                                  const JpegOptions& options, std::string* error) {
  jpeg_compress_struct cinfo{};
  JpegErrorManager err{};
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = JpegErrorExit;
  unsigned char* out = nullptr;
  unsigned long size = 0;
  std::vector<uint8_t> row;
  const bool ok = CompressJpeg(&cinfo, &err, rgb.data(), w, h, options, &out, &size, &row);
  jpeg_destroy_compress(&cinfo);
  std::string bytes;
  if (ok) {
    bytes.assign(reinterpret_cast<const char*>(out), size);
  } else if (error != nullptr) {
    *error = err.message;
  }
  std::free(out);
  return bytes;
}

int64_t LibjpegCoefficientBufferBytes(const std::string& jpeg) {
  jpeg_decompress_struct cinfo{};
  JpegErrorManager err{};
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = JpegErrorExit;
  int64_t bytes = -1;
  if (setjmp(err.jump) == 0) {
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(jpeg.data()),
                 static_cast<unsigned long>(jpeg.size()));
    jpeg_read_header(&cinfo, TRUE);
    // jdinput.c's has_multiple_scans, as the first scan's header tells it.
    const bool buffered = cinfo.progressive_mode || cinfo.comps_in_scan < cinfo.num_components;
    bytes = 0;
    for (int c = 0; buffered && c < cinfo.num_components; ++c) {
      const jpeg_component_info& comp = cinfo.comp_info[c];
      const auto round_up = [](int64_t v, int64_t to) { return (v + to - 1) / to * to; };
      bytes += round_up(comp.width_in_blocks, comp.h_samp_factor) *
               round_up(comp.height_in_blocks, comp.v_samp_factor) *
               static_cast<int64_t>(sizeof(JBLOCK));
    }
  }
  jpeg_destroy_decompress(&cinfo);
  return bytes;
}

std::string WithZeroLengthApp0(const std::string& jpeg) {
  if (jpeg.size() < 2) return jpeg;
  return jpeg.substr(0, 2) + std::string("\xFF\xE0\x00\x00", 4) + jpeg.substr(2);
}

std::string EncodePngWithLibpng(int w, int h, const PngOptions& options, uint32_t seed) {
  const int channels = options.color_type == PNG_COLOR_TYPE_RGB          ? 3
                       : options.color_type == PNG_COLOR_TYPE_RGB_ALPHA  ? 4
                       : options.color_type == PNG_COLOR_TYPE_GRAY_ALPHA ? 2
                                                                         : 1;
  const int depth = options.bit_depth;
  const std::vector<uint8_t> photo = PhotoLikePixels(w, h, channels, seed);
  const bool grey16_low = options.color_type == PNG_COLOR_TYPE_GRAY && depth == 16;
  const size_t bytes_per_sample = depth == 16 ? 2 : 1;
  std::vector<uint8_t> samples(photo.size() * bytes_per_sample);
  std::mt19937 rng(seed + 1);
  for (size_t i = 0; i < photo.size(); ++i) {
    uint16_t v = SampleOfDepth(photo[i], depth, grey16_low, rng());
    if (options.color_type == PNG_COLOR_TYPE_PALETTE) v = photo[i] >> (8 - depth);
    if (depth == 16) {
      samples[2 * i] = static_cast<uint8_t>(v >> 8);
      samples[2 * i + 1] = static_cast<uint8_t>(v);
    } else {
      samples[i] = static_cast<uint8_t>(v);
    }
  }

  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  std::string out;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return "";
  }
  png_set_write_fn(
      png, &out,
      [](png_structp p, png_bytep data, png_size_t n) {
        static_cast<std::string*>(png_get_io_ptr(p))->append(reinterpret_cast<char*>(data), n);
      },
      nullptr);
  png_set_IHDR(png, info, static_cast<png_uint_32>(w), static_cast<png_uint_32>(h), depth,
               options.color_type, options.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  std::vector<png_color> palette;
  std::vector<png_byte> alphas;
  if (options.color_type == PNG_COLOR_TYPE_PALETTE) {
    const int n = 1 << depth;
    for (int i = 0; i < n; ++i) {
      palette.push_back({static_cast<png_byte>(i * 255 / std::max(1, n - 1)),
                         static_cast<png_byte>((i * 97 + 31) % 256),
                         static_cast<png_byte>(255 - i * 255 / std::max(1, n - 1))});
      alphas.push_back(static_cast<png_byte>(i % 3 == 0 ? 0 : 200));
    }
    png_set_PLTE(png, info, palette.data(), n);
  }
  if (options.trns) {
    if (options.color_type == PNG_COLOR_TYPE_PALETTE) {
      png_set_tRNS(png, info, alphas.data(), static_cast<int>(alphas.size()), nullptr);
    } else {
      // The colour of the first pixel: some pixels are "transparent", which an RGB
      // decode must ignore.
      png_color_16 colour{};
      auto sample = [&](int c) -> png_uint_16 {
        return depth == 16 ? static_cast<png_uint_16>((samples[2 * c] << 8) | samples[2 * c + 1])
                           : samples[c];
      };
      colour.gray = sample(0);
      colour.red = sample(0);
      if (channels >= 3) {
        colour.green = sample(1);
        colour.blue = sample(2);
      }
      png_set_tRNS(png, info, nullptr, 0, &colour);
    }
  }
  png_write_info(png, info);
  if (depth < 8) png_set_packing(png);  // one sample per byte in, packed in the file
  const size_t row_bytes = static_cast<size_t>(w) * channels * bytes_per_sample;
  std::vector<png_bytep> rows(static_cast<size_t>(h));
  for (int y = 0; y < h; ++y) rows[y] = samples.data() + static_cast<size_t>(y) * row_bytes;
  png_write_image(png, rows.data());  // writes the Adam7 passes when interlaced
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

std::string EncodeWebpWithLibwebp(int w, int h, bool lossless, bool alpha, uint32_t seed) {
  const int channels = alpha ? 4 : 3;
  const std::vector<uint8_t> px = PhotoLikePixels(w, h, channels, seed);
  uint8_t* out = nullptr;
  size_t size = 0;
  if (lossless) {
    size = alpha ? WebPEncodeLosslessRGBA(px.data(), w, h, w * 4, &out)
                 : WebPEncodeLosslessRGB(px.data(), w, h, w * 3, &out);
  } else {
    size = alpha ? WebPEncodeRGBA(px.data(), w, h, w * 4, 85, &out)
                 : WebPEncodeRGB(px.data(), w, h, w * 3, 85, &out);
  }
  std::string bytes(reinterpret_cast<const char*>(out), size);
  WebPFree(out);
  return bytes;
}

std::vector<CorpusFile> MakeCorpus(bool small) {
  std::vector<CorpusFile> files;
  // Odd sizes, none a multiple of any MCU; `small` for fuzz seeds.
  const int sizes[][2] = {{61, 47}, {97, 35}, {33, 70}, {50, 41}, {129, 67}, {45, 45}};
  int next_size = 0;
  auto size = [&](int* w, int* h) {
    const int* s = sizes[next_size++ % 6];
    *w = small ? std::min(s[0], 23) : s[0];
    *h = small ? std::min(s[1], 19) : s[1];
  };
  uint32_t seed = 1;

  // Every sampling libjpeg accepts beside the usual ones: luma above chroma in odd
  // ratios, chroma above luma, Cr at full resolution beside a subsampled Cb.
  const std::vector<std::vector<Sampling>> samplings = {{{1, 1}, {1, 1}, {1, 1}},
                                                        {{2, 1}, {1, 1}, {1, 1}},
                                                        {{1, 2}, {1, 1}, {1, 1}},
                                                        {{2, 2}, {1, 1}, {1, 1}},
                                                        {{4, 1}, {1, 1}, {1, 1}},
                                                        {{1, 4}, {1, 1}, {1, 1}},
                                                        {{3, 1}, {1, 1}, {1, 1}},
                                                        {{1, 3}, {1, 1}, {1, 1}},
                                                        {{3, 2}, {1, 1}, {1, 1}},
                                                        {{4, 2}, {1, 1}, {1, 1}},
                                                        {{2, 4}, {1, 1}, {1, 1}},
                                                        {{1, 1}, {2, 2}, {2, 2}},
                                                        {{1, 1}, {2, 1}, {2, 1}},
                                                        {{2, 2}, {1, 1}, {2, 2}},
                                                        {{2, 1}, {1, 1}, {2, 1}},
                                                        {{2, 2}, {2, 1}, {1, 1}},
                                                        {{1, 1}}};
  auto sampling_name = [](const std::vector<Sampling>& s) {
    std::string name;
    for (const Sampling& c : s) absl::StrAppend(&name, name.empty() ? "" : "_", c.h, "x", c.v);
    return s.size() == 1 ? std::string("grey") : name;
  };
  for (const std::vector<Sampling>& s : samplings) {
    const bool odd = !(s.size() == 3 && s[1].h == 1 && s[1].v == 1 && s[2].h == 1 && s[2].v == 1 &&
                       s[0].h <= 2 && s[0].v <= 2);
    struct Variant {
      const char* name;
      bool progressive;
      int restart;
    };
    std::vector<Variant> variants = {{"", false, 0}};
    if (odd || s.size() == 1) {
      variants.push_back({"-progressive", true, 0});
      variants.push_back({"-restart", false, 2});
    }
    for (const Variant& v : variants) {
      int w = 0, h = 0;
      size(&w, &h);
      JpegOptions options;
      options.sampling = s;
      options.progressive = v.progressive;
      options.restart_interval = v.restart;
      std::string error;
      std::string jpeg =
          EncodeJpegWithLibjpeg(PhotoLikePixels(w, h, 3, seed++), w, h, options, &error);
      if (jpeg.empty()) continue;  // libjpeg refused the settings: not a file anyone writes
      files.push_back(
          {absl::StrFormat("jpeg-%s%s-%dx%d.jpg", sampling_name(s), v.name, w, h), jpeg});
    }
  }
  for (const std::vector<Sampling>& s : {samplings[3], samplings[5]}) {
    // Sequential, a scan per component: the whole image's coefficients are buffered.
    int w = 0, h = 0;
    size(&w, &h);
    JpegOptions options;
    options.sampling = s;
    options.scan_per_component = true;
    std::string error;
    files.push_back(
        {absl::StrFormat("jpeg-%s-scan-per-component-%dx%d.jpg", sampling_name(s), w, h),
         EncodeJpegWithLibjpeg(PhotoLikePixels(w, h, 3, seed++), w, h, options, &error)});
  }
  {
    // A zero-length APP0 before a progressive frame (seen in the wild; libjpeg steps over).
    int w = 0, h = 0;
    size(&w, &h);
    JpegOptions options;
    options.progressive = true;
    std::string error;
    files.push_back({absl::StrFormat("jpeg-zero-app0-progressive-%dx%d.jpg", w, h),
                     WithZeroLengthApp0(EncodeJpegWithLibjpeg(PhotoLikePixels(w, h, 3, seed++), w,
                                                              h, options, &error))});
  }

  // Every PNG colour type at every bit depth it allows, tRNS where it applies, and
  // Adam7 interlacing.
  struct PngCase {
    int color_type;
    std::vector<int> depths;
    const char* name;
  };
  const PngCase png_cases[] = {
      {PNG_COLOR_TYPE_GRAY, {1, 2, 4, 8, 16}, "grey"},
      {PNG_COLOR_TYPE_RGB, {8, 16}, "rgb"},
      {PNG_COLOR_TYPE_PALETTE, {1, 2, 4, 8}, "palette"},
      {PNG_COLOR_TYPE_GRAY_ALPHA, {8, 16}, "greyalpha"},
      {PNG_COLOR_TYPE_RGB_ALPHA, {8, 16}, "rgba"},
  };
  for (const PngCase& c : png_cases) {
    for (int depth : c.depths) {
      const bool has_alpha = c.color_type & PNG_COLOR_MASK_ALPHA;
      for (bool trns : {false, true}) {
        if (trns && (has_alpha || (depth < 8 && c.color_type != PNG_COLOR_TYPE_PALETTE))) {
          continue;  // tRNS only on colour types without alpha; sub-byte grey: one is enough
        }
        int w = 0, h = 0;
        size(&w, &h);
        PngOptions options{c.color_type, depth, trns, false};
        files.push_back(
            {absl::StrFormat("png-%s%d%s-%dx%d.png", c.name, depth, trns ? "-trns" : "", w, h),
             EncodePngWithLibpng(w, h, options, seed++)});
      }
    }
  }
  for (const PngOptions& o : {PngOptions{PNG_COLOR_TYPE_GRAY, 16, false, true},
                              PngOptions{PNG_COLOR_TYPE_PALETTE, 4, true, true},
                              PngOptions{PNG_COLOR_TYPE_RGB_ALPHA, 16, false, true}}) {
    int w = 0, h = 0;
    size(&w, &h);
    files.push_back(
        {absl::StrFormat("png-type%d-%d-interlaced-%dx%d.png", o.color_type, o.bit_depth, w, h),
         EncodePngWithLibpng(w, h, o, seed++)});
  }

  for (bool lossless : {false, true}) {
    for (bool alpha : {false, true}) {
      int w = 0, h = 0;
      size(&w, &h);
      files.push_back({absl::StrFormat("webp-%s%s-%dx%d.webp", lossless ? "lossless" : "lossy",
                                       alpha ? "-alpha" : "", w, h),
                       EncodeWebpWithLibwebp(w, h, lossless, alpha, seed++)});
    }
  }
  return files;
}

}  // namespace shardcast::image_corpus
