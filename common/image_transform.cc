// torchvision-equivalent Resize+CenterCrop and RandomResizedCrop+HFlip, written
// straight into a planar uint8 buffer; only output pixels that survive the crop
// are computed.
#include "common/image_transform.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/image_decode_internal.h"
#include "common/jpeg_region_decode.h"
#include "common/splitmix64.h"

namespace shardcast {
namespace {

// A thread keeps its decode buffer between images; one bigger than this (a huge
// photo) is released after use instead.
constexpr size_t kMaxRetainedScratch = size_t{64} << 20;

// ------------------------------------------------------------ resampling taps

// One axis of a separable antialiased bilinear resample, with the semantics of
// torch's _upsample_bilinear2d_aa (aten/src/ATen/native/cpu/UpSampleKernel.cpp)
// and PIL's Resample.c: for output i, center = offset + (i + 0.5) * scale;
// a triangle filter whose support is `scale` when downscaling (else 1), window
// [center - support + 0.5, center + support + 0.5) clamped to [lo, hi), weights
// normalized to sum 1.
struct AxisTaps {
  std::vector<int> start;      // first source index of output i
  std::vector<int> count;      // number of taps of output i
  std::vector<float> weights;  // output i's weights at [i * stride, i * stride + count[i])
  int stride = 0;
  int max_count = 0;  // largest count[i]; weights past count[i] are zero up to it
  int needed_lo = 0;  // union of all windows: [needed_lo, needed_hi)
  int needed_hi = 0;
};

void ComputeTaps(double offset, double scale, int out_count, int lo, int hi, AxisTaps* t) {
  const double support = scale >= 1.0 ? scale : 1.0;
  const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  t->stride = static_cast<int>(std::ceil(2.0 * support)) + 2;
  t->start.assign(out_count, 0);
  t->count.assign(out_count, 0);
  t->weights.assign(static_cast<size_t>(out_count) * t->stride, 0.0f);
  t->max_count = 0;
  t->needed_lo = hi;
  t->needed_hi = lo;
  std::vector<double> w(t->stride);
  for (int i = 0; i < out_count; ++i) {
    const double center = offset + (i + 0.5) * scale;
    int xmin = std::max(static_cast<int>(std::floor(center - support + 0.5)), lo);
    int xmax = std::min(static_cast<int>(std::floor(center + support + 0.5)), hi);
    xmax = std::min(xmax, xmin + t->stride);
    double total = 0.0;
    int n = 0;
    for (int j = xmin; j < xmax; ++j, ++n) {
      const double x = std::fabs((j - center + 0.5) * invscale);
      w[n] = x < 1.0 ? 1.0 - x : 0.0;
      total += w[n];
    }
    if (n == 0 || total <= 0.0) {
      // Only reachable for degenerate regions (a window clipped away entirely):
      // fall back to the nearest source pixel rather than dividing by zero.
      xmin = std::clamp(static_cast<int>(std::floor(center)), lo, hi - 1);
      n = 1;
      w[0] = total = 1.0;
    }
    t->start[i] = xmin;
    t->count[i] = n;
    for (int k = 0; k < n; ++k) t->weights[static_cast<size_t>(i) * t->stride + k] = w[k] / total;
    t->max_count = std::max(t->max_count, n);
    t->needed_lo = std::min(t->needed_lo, xmin);
    t->needed_hi = std::max(t->needed_hi, xmin + n);
  }
}

// Vertical pass for one output row: out[j] = sum_k w[k] * rows[k][j], j < n.
void VerticalPassSse2(const uint8_t* const* rows, const float* w, int taps, int n, float* out) {
  int j = 0;
#if defined(__SSE2__)
  const __m128i zero = _mm_setzero_si128();
  for (; j + 16 <= n; j += 16) {
    __m128 a0 = _mm_setzero_ps(), a1 = _mm_setzero_ps(), a2 = _mm_setzero_ps(),
           a3 = _mm_setzero_ps();
    for (int k = 0; k < taps; ++k) {
      const __m128 wk = _mm_set1_ps(w[k]);
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[k] + j));
      const __m128i lo16 = _mm_unpacklo_epi8(b, zero);
      const __m128i hi16 = _mm_unpackhi_epi8(b, zero);
      a0 = _mm_add_ps(a0, _mm_mul_ps(wk, _mm_cvtepi32_ps(_mm_unpacklo_epi16(lo16, zero))));
      a1 = _mm_add_ps(a1, _mm_mul_ps(wk, _mm_cvtepi32_ps(_mm_unpackhi_epi16(lo16, zero))));
      a2 = _mm_add_ps(a2, _mm_mul_ps(wk, _mm_cvtepi32_ps(_mm_unpacklo_epi16(hi16, zero))));
      a3 = _mm_add_ps(a3, _mm_mul_ps(wk, _mm_cvtepi32_ps(_mm_unpackhi_epi16(hi16, zero))));
    }
    _mm_storeu_ps(out + j, a0);
    _mm_storeu_ps(out + j + 4, a1);
    _mm_storeu_ps(out + j + 8, a2);
    _mm_storeu_ps(out + j + 12, a3);
  }
#endif
  for (; j < n; ++j) {
    float acc = 0.0f;
    for (int k = 0; k < taps; ++k) acc += w[k] * static_cast<float>(rows[k][j]);
    out[j] = acc;
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// The same with AVX2 + FMA, 8 lanes, chosen at run time (the build targets
// baseline x86-64; the pass is most of the transform's arithmetic).
__attribute__((target("avx2,fma"))) void VerticalPassAvx2(const uint8_t* const* rows,
                                                          const float* w, int taps, int n,
                                                          float* out) {
  int j = 0;
  for (; j + 32 <= n; j += 32) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(),
           a3 = _mm256_setzero_ps();
    for (int k = 0; k < taps; ++k) {
      const __m256 wk = _mm256_set1_ps(w[k]);
      const uint8_t* r = rows[k] + j;
      a0 = _mm256_fmadd_ps(wk,
                           _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                               _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r)))),
                           a0);
      a1 = _mm256_fmadd_ps(wk,
                           _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                               _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r + 8)))),
                           a1);
      a2 = _mm256_fmadd_ps(wk,
                           _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                               _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r + 16)))),
                           a2);
      a3 = _mm256_fmadd_ps(wk,
                           _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                               _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r + 24)))),
                           a3);
    }
    _mm256_storeu_ps(out + j, a0);
    _mm256_storeu_ps(out + j + 8, a1);
    _mm256_storeu_ps(out + j + 16, a2);
    _mm256_storeu_ps(out + j + 24, a3);
  }
  for (; j < n; ++j) {
    float acc = 0.0f;
    for (int k = 0; k < taps; ++k) acc += w[k] * static_cast<float>(rows[k][j]);
    out[j] = acc;
  }
}

bool HasAvx2Fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
#endif

void VerticalPass(const uint8_t* const* rows, const float* w, int taps, int n, float* out) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (HasAvx2Fma()) return VerticalPassAvx2(rows, w, taps, n, out);
#endif
  VerticalPassSse2(rows, w, taps, n, out);
}

// Horizontal pass for one output row from the vertically filtered RGB floats
// `row` (pixel 0 = source column needed_lo; zero padding at the end), writing
// channel planes r/g/b at output columns (mirrored when `flip`). Every output
// runs xt.max_count taps (the extra weights are zero), so for the usual small
// counts the tap loop is unrolled at compile time (kTaps > 0).
template <int kTaps>
void HorizontalPass(const float* row, const AxisTaps& xt, int crop, bool flip, uint8_t* r,
                    uint8_t* g, uint8_t* b) {
  const int taps = kTaps > 0 ? kTaps : xt.max_count;
  for (int x = 0; x < crop; ++x) {
    const float* w = xt.weights.data() + static_cast<size_t>(x) * xt.stride;
    const float* p = row + static_cast<size_t>(xt.start[x] - xt.needed_lo) * 3;
    const int ox = flip ? crop - 1 - x : x;
#if defined(__SSE2__)
    // Lanes r, g, b, (next pixel's r, ignored): one 4-wide multiply-add per tap.
    __m128 acc = _mm_setzero_ps();
    for (int k = 0; k < taps; ++k) {
      acc = _mm_add_ps(acc, _mm_mul_ps(_mm_set1_ps(w[k]), _mm_loadu_ps(p + 3 * k)));
    }
    // cvtps rounds half to even (default MXCSR), as torch.round; packs saturate
    // to [0, 255], as the clamp before the uint8 cast.
    const __m128i i32 = _mm_cvtps_epi32(acc);
    const __m128i i16 = _mm_packs_epi32(i32, i32);
    const uint32_t v = static_cast<uint32_t>(_mm_cvtsi128_si32(_mm_packus_epi16(i16, i16)));
    r[ox] = static_cast<uint8_t>(v);
    g[ox] = static_cast<uint8_t>(v >> 8);
    b[ox] = static_cast<uint8_t>(v >> 16);
#else
    float acc[3] = {0.0f, 0.0f, 0.0f};
    for (int k = 0; k < taps; ++k) {
      for (int c = 0; c < 3; ++c) acc[c] += w[k] * p[3 * k + c];
    }
    auto to_u8 = [](float v) {
      return static_cast<uint8_t>(std::clamp(std::nearbyint(v), 0.0f, 255.0f));
    };
    r[ox] = to_u8(acc[0]);
    g[ox] = to_u8(acc[1]);
    b[ox] = to_u8(acc[2]);
#endif
  }
}

using HorizontalPassFn = void (*)(const float*, const AxisTaps&, int, bool, uint8_t*, uint8_t*,
                                  uint8_t*);

HorizontalPassFn PickHorizontalPass(int taps) {
  switch (taps) {
    case 1:
      return HorizontalPass<1>;
    case 2:
      return HorizontalPass<2>;
    case 3:
      return HorizontalPass<3>;
    case 4:
      return HorizontalPass<4>;
    case 5:
      return HorizontalPass<5>;
    case 6:
      return HorizontalPass<6>;
    default:
      return HorizontalPass<0>;
  }
}

// Both axes' taps of one transform, in the coordinates of the whole image at the
// decode's DCT scale, and whether the output is mirrored.
struct ResampleTaps {
  AxisTaps x;
  AxisTaps y;
  bool flip = false;
};

// Resamples `image` through the taps into crop x crop planar RGB: vertical pass into
// one float row (only the needed columns), then the horizontal pass straight into the
// output planes. `image` holds the rectangle of the whole (scaled) image whose top-left
// pixel is (origin_x, origin_y) and must cover the taps' needed ranges.
void Resample(const RgbImage& image, int origin_x, int origin_y, const ResampleTaps& t, int crop,
              uint8_t* out_chw) {
  const AxisTaps& xt = t.x;
  const AxisTaps& yt = t.y;
  thread_local std::vector<float> row;
  thread_local std::vector<const uint8_t*> rows;
  const int span = (xt.needed_hi - xt.needed_lo) * 3;
  // Padding: the last output's taps run to max_count pixels, plus one float
  // for the 4-wide load of the last pixel.
  row.assign(static_cast<size_t>(span) + 3 * static_cast<size_t>(xt.max_count) + 4, 0.0f);
  const HorizontalPassFn horizontal = PickHorizontalPass(xt.max_count);
  rows.resize(yt.stride);
  const size_t plane = static_cast<size_t>(crop) * crop;
  const size_t src_stride = static_cast<size_t>(image.width) * 3;
  const uint8_t* base = image.pixels.data() + static_cast<size_t>(xt.needed_lo - origin_x) * 3;
  for (int y = 0; y < crop; ++y) {
    const int n = yt.count[y];
    for (int k = 0; k < n; ++k) {
      rows[k] = base + static_cast<size_t>(yt.start[y] + k - origin_y) * src_stride;
    }
    VerticalPass(rows.data(), yt.weights.data() + static_cast<size_t>(y) * yt.stride, n, span,
                 row.data());
    uint8_t* r = out_chw + static_cast<size_t>(y) * crop;
    horizontal(row.data(), xt, crop, t.flip, r, r + plane, r + 2 * plane);
  }
}

// ------------------------------------------------------------ geometry

absl::Status CheckSpec(const TransformSpec& spec) {
  if (spec.crop < 1 || spec.crop > kMaxCrop) {
    return absl::InvalidArgumentError(
        absl::StrFormat("transform crop %d is outside [1, %d]", spec.crop, kMaxCrop));
  }
  if (spec.mode == TransformMode::kCenter) {
    if (spec.resize < 1 || spec.resize > kMaxResize) {
      return absl::InvalidArgumentError(
          absl::StrFormat("transform resize %d is outside [1, %d]", spec.resize, kMaxResize));
    }
    // torchvision would zero-pad a crop larger than the resized image; a
    // configuration that pads every image is a mistake, so refuse it.
    if (spec.crop > spec.resize) {
      return absl::InvalidArgumentError(
          absl::StrFormat("center transform: crop %d is larger than resize %d (short side)",
                          spec.crop, spec.resize));
    }
  } else if (spec.mode != TransformMode::kRandom) {
    return absl::InvalidArgumentError("unknown transform mode");
  }
  return absl::OkStatus();
}

absl::Status CheckImage(const RgbImage& image) {
  if (image.width <= 0 || image.height <= 0 ||
      image.pixels.size() != static_cast<size_t>(image.width) * image.height * 3) {
    return absl::InvalidArgumentError(
        absl::StrFormat("image %dx%d with %d bytes is not a valid RGB image", image.width,
                        image.height, image.pixels.size()));
  }
  return absl::OkStatus();
}

// torchvision Resize(S) (transforms.functional._compute_resized_output_size)
// then CenterCrop(C) (top = int(round((h - C) / 2.0)), round half to even).
struct CenterGeometry {
  int new_w = 0;
  int new_h = 0;
  int top = 0;
  int left = 0;
};

// The longest side Resize(S) may produce. The geometry is computed before any pixel
// exists, from a header that may claim a 1 x 80,000,000 image: Resize(31) of that is
// 2.5e9 pixels long, past int. No real photograph comes near this bound.
constexpr int64_t kMaxResizedSide = int64_t{1} << 24;

absl::StatusOr<CenterGeometry> CenterResizeCrop(int w, int h, int resize, int crop) {
  const int64_t shorter = std::min(w, h), longer = std::max(w, h);
  const int64_t new_long = int64_t{resize} * longer / shorter;  // floor, as int() in Python
  if (new_long > kMaxResizedSide) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a %dx%d image resized to short side %d would be %d pixels long (over %d): aspect "
        "ratio too extreme",
        w, h, resize, new_long, kMaxResizedSide));
  }
  CenterGeometry g;
  g.new_w = w <= h ? resize : static_cast<int>(new_long);
  g.new_h = w <= h ? static_cast<int>(new_long) : resize;
  g.top = static_cast<int>(std::nearbyint((g.new_h - crop) / 2.0));
  g.left = static_cast<int>(std::nearbyint((g.new_w - crop) / 2.0));
  return g;
}

// kCenter's taps for the orig_w x orig_h original decoded at `factor` (1 = not
// DCT-scaled) to scaled_w x scaled_h: geometry `g` comes from the original size,
// sampling from the scaled pixels.
void CenterTaps(const CenterGeometry& g, int orig_w, int orig_h, int scaled_w, int scaled_h,
                double factor, int crop, ResampleTaps* t) {
  const double sx = orig_w * factor / g.new_w, sy = orig_h * factor / g.new_h;
  ComputeTaps(g.left * sx, sx, crop, 0, scaled_w, &t->x);
  ComputeTaps(g.top * sy, sy, crop, 0, scaled_h, &t->y);
  t->flip = false;
}

// The taps of a region given in original coordinates, sampled from the original
// decoded at `factor` to scaled_w x scaled_h. At factor 1 the windows clamp to the
// region itself, exactly as torchvision crops first and resizes the crop.
void RegionTaps(const CropParams& p, int scaled_w, int scaled_h, double factor, int crop,
                ResampleTaps* t) {
  const double x0 = p.left * factor, y0 = p.top * factor;
  const double rw = p.width * factor, rh = p.height * factor;
  const int xlo = std::clamp(static_cast<int>(std::floor(x0)), 0, scaled_w - 1);
  const int ylo = std::clamp(static_cast<int>(std::floor(y0)), 0, scaled_h - 1);
  const int xhi = std::clamp(static_cast<int>(std::ceil(x0 + rw)), xlo + 1, scaled_w);
  const int yhi = std::clamp(static_cast<int>(std::ceil(y0 + rh)), ylo + 1, scaled_h);
  ComputeTaps(x0, rw / crop, crop, xlo, xhi, &t->x);
  ComputeTaps(y0, rh / crop, crop, ylo, yhi, &t->y);
  t->flip = p.flip;
}

absl::Status CheckRegion(const CropParams& p, int w, int h) {
  if (p.width <= 0 || p.height <= 0 || p.left < 0 || p.top < 0 ||
      static_cast<int64_t>(p.left) + p.width > w || static_cast<int64_t>(p.top) + p.height > h) {
    return absl::InvalidArgumentError(
        absl::StrFormat("crop region %dx%d at (left %d, top %d) is not inside the %dx%d image",
                        p.width, p.height, p.left, p.top, w, h));
  }
  return absl::OkStatus();
}

}  // namespace

CropParams RandomResizedCropParams(int width, int height, uint64_t augment_seed) {
  SplitMix64 rng(augment_seed);
  CropParams p;
  const double area = static_cast<double>(width) * height;
  const double log_lo = std::log(3.0 / 4.0), log_hi = std::log(4.0 / 3.0);
  bool found = false;
  for (int attempt = 0; attempt < 10 && !found; ++attempt) {
    const double target_area = area * (0.08 + rng.Uniform() * (1.0 - 0.08));
    const double aspect = std::exp(log_lo + rng.Uniform() * (log_hi - log_lo));
    const int w = static_cast<int>(std::nearbyint(std::sqrt(target_area * aspect)));
    const int h = static_cast<int>(std::nearbyint(std::sqrt(target_area / aspect)));
    if (0 < w && w <= width && 0 < h && h <= height) {
      p.top = static_cast<int>(rng.Below(int64_t{height} - h + 1));
      p.left = static_cast<int>(rng.Below(int64_t{width} - w + 1));
      p.width = w;
      p.height = h;
      found = true;
    }
  }
  if (!found) {  // torchvision's fallback: centre crop with the ratio clamped
    const double in_ratio = static_cast<double>(width) / height;
    if (in_ratio < 3.0 / 4.0) {
      p.width = width;
      p.height = static_cast<int>(std::nearbyint(width / (3.0 / 4.0)));
    } else if (in_ratio > 4.0 / 3.0) {
      p.height = height;
      p.width = static_cast<int>(std::nearbyint(height * (4.0 / 3.0)));
    } else {
      p.width = width;
      p.height = height;
    }
    p.width = std::clamp(p.width, 1, std::max(width, 1));
    p.height = std::clamp(p.height, 1, std::max(height, 1));
    p.top = (height - p.height) / 2;
    p.left = (width - p.width) / 2;
  }
  p.flip = rng.Uniform() < 0.5;
  return p;
}

absl::Status ResizedCropToChw(const RgbImage& image, const CropParams& params, int crop,
                              uint8_t* out_chw) {
  if (absl::Status s = CheckImage(image); !s.ok()) return s;
  if (crop < 1 || crop > kMaxCrop) {
    return absl::InvalidArgumentError(
        absl::StrFormat("crop %d is outside [1, %d]", crop, kMaxCrop));
  }
  if (absl::Status s = CheckRegion(params, image.width, image.height); !s.ok()) return s;
  ResampleTaps taps;
  RegionTaps(params, image.width, image.height, 1.0, crop, &taps);
  Resample(image, 0, 0, taps, crop, out_chw);
  return absl::OkStatus();
}

absl::Status ApplyTransform(const RgbImage& image, const TransformSpec& spec, uint64_t augment_seed,
                            uint8_t* out_chw) {
  if (absl::Status s = CheckSpec(spec); !s.ok()) return s;
  if (absl::Status s = CheckImage(image); !s.ok()) return s;
  ResampleTaps taps;
  if (spec.mode == TransformMode::kCenter) {
    absl::StatusOr<CenterGeometry> g =
        CenterResizeCrop(image.width, image.height, spec.resize, spec.crop);
    if (!g.ok()) return g.status();
    CenterTaps(*g, image.width, image.height, image.width, image.height, 1.0, spec.crop, &taps);
  } else {
    RegionTaps(RandomResizedCropParams(image.width, image.height, augment_seed), image.width,
               image.height, 1.0, spec.crop, &taps);
  }
  Resample(image, 0, 0, taps, spec.crop, out_chw);
  return absl::OkStatus();
}

namespace {

// Holds an admission's bytes for one decode and gives them back on every path.
class AdmittedBytes {
 public:
  AdmittedBytes(DecodeAdmission* admission, int64_t bytes) : admission_(admission), bytes_(bytes) {}
  ~AdmittedBytes() {
    if (admission_ != nullptr) admission_->Release(bytes_);
  }
  AdmittedBytes(const AdmittedBytes&) = delete;
  AdmittedBytes& operator=(const AdmittedBytes&) = delete;

 private:
  DecodeAdmission* const admission_;  // null: nothing held
  const int64_t bytes_;
};

}  // namespace

absl::Status DecodeAndTransform(absl::string_view encoded, const TransformSpec& spec,
                                uint64_t augment_seed, uint8_t* out_chw,
                                DecodeAdmission* admission) {
  if (absl::Status s = CheckSpec(spec); !s.ok()) return s;
  absl::StatusOr<ImageInfo> info = ReadImageInfo(encoded);
  if (!info.ok()) return info.status();
  const int w = info->width, h = info->height;

  // The region (in original pixels) that must keep at least `need_w` x `need_h`
  // pixels after DCT scaling: for kCenter the whole image must stay at least
  // the resized size (short side >= S), for kRandom the crop region >= C.
  CenterGeometry center;
  CropParams region;
  int64_t region_w = w, region_h = h, need_w = 0, need_h = 0;
  if (spec.mode == TransformMode::kCenter) {
    absl::StatusOr<CenterGeometry> g = CenterResizeCrop(w, h, spec.resize, spec.crop);
    if (!g.ok()) return g.status();
    center = *g;
    need_w = center.new_w;
    need_h = center.new_h;
  } else {
    region = RandomResizedCropParams(w, h, augment_seed);
    region_w = region.width;
    region_h = region.height;
    need_w = need_h = spec.crop;
  }
  internal::ScalingFactor f;
  if (spec.dct_scaling && info->is_jpeg) {
    f = internal::ChooseScalingFactor([&](internal::ScalingFactor s) {
      return region_w * s.num >= need_w * s.denom && region_h * s.num >= need_h * s.denom;
    });
  }

  const int scaled_w = internal::ScaledSize(w, f), scaled_h = internal::ScaledSize(h, f);
  const double factor = static_cast<double>(f.num) / f.denom;
  ResampleTaps taps;
  if (spec.mode == TransformMode::kCenter) {
    CenterTaps(center, w, h, scaled_w, scaled_h, factor, spec.crop, &taps);
  } else {
    RegionTaps(region, scaled_w, scaled_h, factor, spec.crop, &taps);
  }
  // Only the pixels the taps read: a sequential JPEG decodes just that rectangle.
  const internal::PixelRect needed{taps.x.needed_lo, taps.y.needed_lo,
                                   taps.x.needed_hi - taps.x.needed_lo,
                                   taps.y.needed_hi - taps.y.needed_lo};
  const bool region_decode = internal::RegionDecodable(*info, encoded);

  // Decided from the header alone, before any pixel buffer exists.
  std::optional<AdmittedBytes> admitted;
  if (admission != nullptr) {
    const int64_t bytes = region_decode ? internal::RegionDecodeBytes(needed, scaled_w, scaled_h)
                                        : DecodeBufferBytes(*info, f.num, f.denom);
    if (absl::Status s = admission->Acquire(bytes); !s.ok()) return s;
    admitted.emplace(admission, bytes);
  }

  thread_local RgbImage scratch;
  internal::PixelRect got{0, 0, scaled_w, scaled_h};
  absl::Status status = region_decode
                            ? internal::DecodeJpegRegion(encoded, f, needed, &scratch, &got)
                            : internal::DecodeInto(encoded, f, &scratch);
  if (status.ok() &&
      (scratch.width != got.width || scratch.height != got.height || got.x > needed.x ||
       got.y > needed.y || got.x + got.width < needed.x + needed.width ||
       got.y + got.height < needed.y + needed.height)) {
    status = absl::InternalError(absl::StrFormat(
        "decoded %dx%d at (%d, %d), needed %dx%d at (%d, %d) of %dx%d (header %dx%d, scale "
        "%d/%d)",
        scratch.width, scratch.height, got.x, got.y, needed.width, needed.height, needed.x,
        needed.y, scaled_w, scaled_h, w, h, f.num, f.denom));
  }
  if (status.ok()) Resample(scratch, got.x, got.y, taps, spec.crop, out_chw);
  if (scratch.pixels.capacity() > kMaxRetainedScratch) {
    std::vector<uint8_t>().swap(scratch.pixels);
  }
  return status;
}

}  // namespace shardcast
