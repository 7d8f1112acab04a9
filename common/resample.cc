// Fixed-point separable resampling (Pillow-SIMD's approach): 14-bit weights, a vertical
// pass of uint8 rows into 16-bit values with 7 fractional bits, and a horizontal pass
// into uint8 planes. Every kernel level computes exactly the same integers, so the
// dispatch never changes the bytes.
#include "common/resample.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SHARDCAST_RESAMPLE_X86 1
#endif

namespace shardcast {
namespace internal {
namespace {

// The vertical pass keeps 7 fractional bits: values up to 255 << 7 = 32640 fit int16
// (the weights are non-negative and sum to 1), and the horizontal pass's products,
// up to 32640 << 14, fit int32.
constexpr int kFractionBits = 7;
constexpr int kVerticalShift = AxisTaps::kWeightBits - kFractionBits;
constexpr int kHorizontalShift = AxisTaps::kWeightBits + kFractionBits;

// ------------------------------------------------------------ vertical pass
// out[j] = (sum_k w[k] * rows[k][j] + round) >> kVerticalShift, for j < n.

void VerticalScalar(const uint8_t* const* rows, const int16_t* w, int taps, int from, int n,
                    int16_t* out) {
  for (int j = from; j < n; ++j) {
    int32_t acc = 1 << (kVerticalShift - 1);
    for (int k = 0; k < taps; ++k) acc += int32_t{w[k]} * rows[k][j];
    out[j] = static_cast<int16_t>(acc >> kVerticalShift);
  }
}

#ifdef SHARDCAST_RESAMPLE_X86
// Weights k and k+1 (0 when k is the last tap) as the two 16-bit halves one pmaddwd
// lane multiplies an interleaved pair of source bytes with.
inline int32_t TapPair(const int16_t* w, int k, bool pair) {
  return static_cast<int32_t>(
      (static_cast<uint32_t>(pair ? static_cast<uint16_t>(w[k + 1]) : 0) << 16) |
      static_cast<uint16_t>(w[k]));
}

// Two source rows at a time: their bytes widened to 16 bits and interleaved, so one
// pmaddwd multiplies and adds both taps for 4 (SSE2) or 8 (AVX2) columns.
void VerticalSse2(const uint8_t* const* rows, const int16_t* w, int taps, int n, int16_t* out) {
  const __m128i zero = _mm_setzero_si128();
  const __m128i round = _mm_set1_epi32(1 << (kVerticalShift - 1));
  int j = 0;
  for (; j + 16 <= n; j += 16) {
    __m128i acc0 = round, acc1 = round, acc2 = round, acc3 = round;
    for (int k = 0; k < taps; k += 2) {
      const bool pair = k + 1 < taps;
      const __m128i wk = _mm_set1_epi32(TapPair(w, k, pair));
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[k] + j));
      const __m128i b =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[pair ? k + 1 : k] + j));
      const __m128i a_lo = _mm_unpacklo_epi8(a, zero), a_hi = _mm_unpackhi_epi8(a, zero);
      const __m128i b_lo = _mm_unpacklo_epi8(b, zero), b_hi = _mm_unpackhi_epi8(b, zero);
      acc0 = _mm_add_epi32(acc0, _mm_madd_epi16(_mm_unpacklo_epi16(a_lo, b_lo), wk));
      acc1 = _mm_add_epi32(acc1, _mm_madd_epi16(_mm_unpackhi_epi16(a_lo, b_lo), wk));
      acc2 = _mm_add_epi32(acc2, _mm_madd_epi16(_mm_unpacklo_epi16(a_hi, b_hi), wk));
      acc3 = _mm_add_epi32(acc3, _mm_madd_epi16(_mm_unpackhi_epi16(a_hi, b_hi), wk));
    }
    const __m128i lo =
        _mm_packs_epi32(_mm_srai_epi32(acc0, kVerticalShift), _mm_srai_epi32(acc1, kVerticalShift));
    const __m128i hi =
        _mm_packs_epi32(_mm_srai_epi32(acc2, kVerticalShift), _mm_srai_epi32(acc3, kVerticalShift));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j), lo);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j + 8), hi);
  }
  VerticalScalar(rows, w, taps, j, n, out);
}

__attribute__((target("avx2"))) void VerticalAvx2(const uint8_t* const* rows, const int16_t* w,
                                                  int taps, int n, int16_t* out) {
  const __m256i round = _mm256_set1_epi32(1 << (kVerticalShift - 1));
  int j = 0;
  for (; j + 32 <= n; j += 32) {
    __m256i acc0 = round, acc1 = round, acc2 = round, acc3 = round;
    for (int k = 0; k < taps; k += 2) {
      const bool pair = k + 1 < taps;
      const __m256i wk = _mm256_set1_epi32(TapPair(w, k, pair));
      const uint8_t* ra = rows[k] + j;
      const uint8_t* rb = rows[pair ? k + 1 : k] + j;
      const __m256i a0 =
          _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ra)));
      const __m256i b0 =
          _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rb)));
      const __m256i a1 =
          _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ra + 16)));
      const __m256i b1 =
          _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rb + 16)));
      // Per 128-bit lane: unpacklo takes columns 0-3 (lane 0) and 8-11 (lane 1), unpackhi
      // 4-7 and 12-15; packs below puts them back in order.
      acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(_mm256_unpacklo_epi16(a0, b0), wk));
      acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(_mm256_unpackhi_epi16(a0, b0), wk));
      acc2 = _mm256_add_epi32(acc2, _mm256_madd_epi16(_mm256_unpacklo_epi16(a1, b1), wk));
      acc3 = _mm256_add_epi32(acc3, _mm256_madd_epi16(_mm256_unpackhi_epi16(a1, b1), wk));
    }
    const __m256i lo = _mm256_packs_epi32(_mm256_srai_epi32(acc0, kVerticalShift),
                                          _mm256_srai_epi32(acc1, kVerticalShift));
    const __m256i hi = _mm256_packs_epi32(_mm256_srai_epi32(acc2, kVerticalShift),
                                          _mm256_srai_epi32(acc3, kVerticalShift));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j), lo);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j + 16), hi);
  }
  VerticalScalar(rows, w, taps, j, n, out);
}
#endif  // SHARDCAST_RESAMPLE_X86

// ------------------------------------------------------------ horizontal pass
// For output x (mirrored when flipping): channel c = clamp((sum_k w[k] * v[(s + k) * 3 + c]
// + round) >> kHorizontalShift, 0, 255), with s = start[x] - needed_lo. `v` is padded
// with zeros past the last pixel for the taps' full stride.

uint8_t ToU8(int32_t acc) {
  return static_cast<uint8_t>(std::clamp(acc >> kHorizontalShift, 0, 255));
}

void HorizontalScalar(const int16_t* v, const AxisTaps& xt, int crop, bool flip, uint8_t* r,
                      uint8_t* g, uint8_t* b) {
  for (int x = 0; x < crop; ++x) {
    const int16_t* w = xt.weights.data() + static_cast<size_t>(x) * xt.stride;
    const int16_t* p = v + static_cast<size_t>(xt.start[x] - xt.needed_lo) * 3;
    int32_t acc[3] = {1 << (kHorizontalShift - 1), 1 << (kHorizontalShift - 1),
                      1 << (kHorizontalShift - 1)};
    for (int k = 0; k < xt.max_count; ++k) {
      for (int c = 0; c < 3; ++c) acc[c] += int32_t{w[k]} * p[3 * k + c];
    }
    const int ox = flip ? crop - 1 - x : x;
    r[ox] = ToU8(acc[0]);
    g[ox] = ToU8(acc[1]);
    b[ox] = ToU8(acc[2]);
  }
}

#ifdef SHARDCAST_RESAMPLE_X86
// Each output's weights, two taps at a time, laid out for pmaddwd against a pshufb of
// the two pixels: [w0 w1 w0 w1 w0 w1 0 0] (128 bits). Outputs x and x + 1 (x even)
// alternate, so their pair j is one 256-bit load: unit PairedIndex(x, j, pairs).
size_t PairedIndex(int x, int j, int pairs) {
  return (static_cast<size_t>(x / 2) * pairs + j) * 2 + (x & 1);
}

void PairedWeights(const AxisTaps& xt, int crop, std::vector<int16_t>* paired) {
  const int pairs = (xt.max_count + 1) / 2;
  paired->assign(static_cast<size_t>((crop + 1) / 2) * pairs * 2 * 8, 0);
  for (int x = 0; x < crop; ++x) {
    const int16_t* w = xt.weights.data() + static_cast<size_t>(x) * xt.stride;
    for (int j = 0; j < pairs; ++j) {
      int16_t* dst = paired->data() + PairedIndex(x, j, pairs) * 8;
      for (int c = 0; c < 3; ++c) {
        dst[2 * c] = w[2 * j];
        dst[2 * c + 1] = w[2 * j + 1];  // stride is even: in range, zero past the taps
      }
    }
  }
}

// Output x's pixel as 0x00BBGGRR; `paired` from PairedWeights.
__attribute__((target("ssse3"))) inline uint32_t PixelSsse3(const int16_t* v, const AxisTaps& xt,
                                                            const int16_t* paired, int pairs,
                                                            int x) {
  const __m128i* w = reinterpret_cast<const __m128i*>(paired) + PairedIndex(x, 0, pairs);
  // r0 g0 b0 r1 g1 b1 (int16) -> r0 r1 g0 g1 b0 b1, then two zero lanes.
  const __m128i shuffle = _mm_setr_epi8(0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11, -1, -1, -1, -1);
  const int16_t* p = v + static_cast<size_t>(xt.start[x] - xt.needed_lo) * 3;
  __m128i acc = _mm_set1_epi32(1 << (kHorizontalShift - 1));
  for (int j = 0; j < pairs; ++j) {
    const __m128i px = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 6 * j));
    acc = _mm_add_epi32(acc,
                        _mm_madd_epi16(_mm_shuffle_epi8(px, shuffle), _mm_loadu_si128(w + 2 * j)));
  }
  // Lanes r, g, b, 0: packs saturate, packus clamps to [0, 255].
  const __m128i i32 = _mm_srai_epi32(acc, kHorizontalShift);
  const __m128i i16 = _mm_packs_epi32(i32, i32);
  return static_cast<uint32_t>(_mm_cvtsi128_si32(_mm_packus_epi16(i16, i16)));
}

__attribute__((target("ssse3"))) void HorizontalSsse3(const int16_t* v, const AxisTaps& xt,
                                                      const int16_t* paired, int crop, bool flip,
                                                      uint8_t* r, uint8_t* g, uint8_t* b) {
  const int pairs = (xt.max_count + 1) / 2;
  for (int x = 0; x < crop; ++x) {
    const uint32_t rgb = PixelSsse3(v, xt, paired, pairs, x);
    const int ox = flip ? crop - 1 - x : x;
    r[ox] = static_cast<uint8_t>(rgb);
    g[ox] = static_cast<uint8_t>(rgb >> 8);
    b[ox] = static_cast<uint8_t>(rgb >> 16);
  }
}

// Outputs x (lane 0) and x + 1 (lane 1) as 32-bit r, g, b, 0 before saturation, with
// the arithmetic of PixelSsse3; kPairs > 0 fixes the number of tap pairs at compile
// time.
template <int kPairs>
__attribute__((target("avx2"))) inline __m256i TwoPixelsAvx2(const int16_t* v, const AxisTaps& xt,
                                                             const __m256i* weights, int pairs,
                                                             int x) {
  const __m256i shuffle = _mm256_setr_epi8(0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11, -1, -1, -1, -1, 0,
                                           1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11, -1, -1, -1, -1);
  const int16_t* p0 = v + static_cast<size_t>(xt.start[x] - xt.needed_lo) * 3;
  const int16_t* p1 = v + static_cast<size_t>(xt.start[x + 1] - xt.needed_lo) * 3;
  const __m256i* w = weights + static_cast<size_t>(x / 2) * pairs;  // PairedIndex
  __m256i acc = _mm256_set1_epi32(1 << (kHorizontalShift - 1));
  for (int j = 0; j < (kPairs > 0 ? kPairs : pairs); ++j) {
    const __m256i px = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p0 + 6 * j))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p1 + 6 * j)), 1);
    acc = _mm256_add_epi32(
        acc, _mm256_madd_epi16(_mm256_shuffle_epi8(px, shuffle), _mm256_loadu_si256(w + j)));
  }
  return _mm256_srai_epi32(acc, kHorizontalShift);
}

// Eight outputs per step, split into the three planes in registers: four TwoPixelsAvx2
// packed (saturating, as PixelSsse3) into the bytes of pixels x, x+2, x+4, x+6 (lane 0)
// and x+1, x+3, x+5, x+7 (lane 1), grouped by channel, then the lanes interleaved into
// eight bytes of each plane (reversed when flipping). The last crop % 8 outputs go one
// at a time.
template <int kPairs>
__attribute__((target("avx2"))) void HorizontalAvx2(const int16_t* v, const AxisTaps& xt,
                                                    const int16_t* paired, int crop, bool flip,
                                                    uint8_t* r, uint8_t* g, uint8_t* b) {
  const int pairs = kPairs > 0 ? kPairs : (xt.max_count + 1) / 2;
  const __m256i* weights = reinterpret_cast<const __m256i*>(paired);
  const __m256i by_channel = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
                                              0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m128i reverse = _mm_setr_epi8(7, 6, 5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10, 9, 8);
  int x = 0;
  for (; x + 8 <= crop; x += 8) {
    const __m256i ab = _mm256_packs_epi32(TwoPixelsAvx2<kPairs>(v, xt, weights, pairs, x),
                                          TwoPixelsAvx2<kPairs>(v, xt, weights, pairs, x + 2));
    const __m256i cd = _mm256_packs_epi32(TwoPixelsAvx2<kPairs>(v, xt, weights, pairs, x + 4),
                                          TwoPixelsAvx2<kPairs>(v, xt, weights, pairs, x + 6));
    const __m256i grouped = _mm256_shuffle_epi8(_mm256_packus_epi16(ab, cd), by_channel);
    const __m128i even = _mm256_castsi256_si128(grouped);
    const __m128i odd = _mm256_extracti128_si256(grouped, 1);
    __m128i rg = _mm_unpacklo_epi8(even, odd);  // r of x..x+7, then g
    __m128i bz = _mm_unpackhi_epi8(even, odd);  // b of x..x+7, then zeros
    int at = x;
    if (flip) {
      rg = _mm_shuffle_epi8(rg, reverse);
      bz = _mm_shuffle_epi8(bz, reverse);
      at = crop - 8 - x;
    }
    _mm_storel_epi64(reinterpret_cast<__m128i*>(r + at), rg);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(g + at), _mm_unpackhi_epi64(rg, rg));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(b + at), bz);
  }
  for (; x < crop; ++x) {
    const uint32_t rgb = PixelSsse3(v, xt, paired, pairs, x);
    const int ox = flip ? crop - 1 - x : x;
    r[ox] = static_cast<uint8_t>(rgb);
    g[ox] = static_cast<uint8_t>(rgb >> 8);
    b[ox] = static_cast<uint8_t>(rgb >> 16);
  }
}

using HorizontalAvx2Fn = void (*)(const int16_t*, const AxisTaps&, const int16_t*, int, bool,
                                  uint8_t*, uint8_t*, uint8_t*);

HorizontalAvx2Fn PickHorizontalAvx2(int max_count) {
  switch ((max_count + 1) / 2) {
    case 1:
      return HorizontalAvx2<1>;
    case 2:
      return HorizontalAvx2<2>;
    case 3:
      return HorizontalAvx2<3>;
    case 4:
      return HorizontalAvx2<4>;
    default:
      return HorizontalAvx2<0>;
  }
}
#endif  // SHARDCAST_RESAMPLE_X86

ResampleIsa BestIsa() {
#ifdef SHARDCAST_RESAMPLE_X86
  // The AVX2 level also runs SSSE3 code (every AVX2 CPU has it): the last crop % 8
  // outputs of a row.
  static const ResampleIsa best = __builtin_cpu_supports("avx2")    ? ResampleIsa::kAvx2
                                  : __builtin_cpu_supports("ssse3") ? ResampleIsa::kSsse3
                                                                    : ResampleIsa::kScalar;
  return best;
#else
  return ResampleIsa::kScalar;
#endif
}

ResampleIsa forced_isa = ResampleIsa::kBest;

ResampleIsa CurrentIsa() {
  const ResampleIsa best = BestIsa();
  if (forced_isa == ResampleIsa::kBest) return best;
  return std::min(forced_isa, best);
}

}  // namespace

void ComputeTaps(double offset, double scale, int out_count, int lo, int hi, AxisTaps* t) {
  const double support = scale >= 1.0 ? scale : 1.0;
  const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  const int window = static_cast<int>(std::ceil(2.0 * support)) + 2;
  t->stride = (window + 1) / 2 * 2;
  t->start.assign(out_count, 0);
  t->count.assign(out_count, 0);
  t->weights.assign(static_cast<size_t>(out_count) * t->stride, 0);
  t->max_count = 0;
  t->needed_lo = hi;
  t->needed_hi = lo;
  std::vector<double> w(window);
  constexpr int kOne = 1 << AxisTaps::kWeightBits;
  for (int i = 0; i < out_count; ++i) {
    const double center = offset + (i + 0.5) * scale;
    int xmin = std::max(static_cast<int>(std::floor(center - support + 0.5)), lo);
    int xmax = std::min(static_cast<int>(std::floor(center + support + 0.5)), hi);
    xmax = std::min(xmax, xmin + window);
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
    // Quantized so they sum to exactly kOne: the largest takes the rounding remainder,
    // so a uniform image stays uniform and nothing overflows.
    int16_t* q = t->weights.data() + static_cast<size_t>(i) * t->stride;
    int sum = 0, largest = 0;
    for (int k = 0; k < n; ++k) {
      q[k] = static_cast<int16_t>(std::lround(w[k] / total * kOne));
      sum += q[k];
      if (q[k] > q[largest]) largest = k;
    }
    q[largest] = static_cast<int16_t>(q[largest] + (kOne - sum));
    t->max_count = std::max(t->max_count, n);
    t->needed_lo = std::min(t->needed_lo, xmin);
    t->needed_hi = std::max(t->needed_hi, xmin + n);
  }
}

void Resample(const RgbImage& image, int origin_x, int origin_y, const ResampleTaps& t, int crop,
              uint8_t* out_chw) {
  const AxisTaps& xt = t.x;
  const AxisTaps& yt = t.y;
  const ResampleIsa isa = CurrentIsa();
  thread_local std::vector<int16_t> row;
  thread_local std::vector<const uint8_t*> rows;
  thread_local std::vector<int16_t> paired;
  const int span = (xt.needed_hi - xt.needed_lo) * 3;
  // Padding: the last output's taps run a whole stride of pixels from its start, and
  // the SIMD horizontal pass loads 8 values for the last pair of taps.
  row.assign(static_cast<size_t>(span) + 3 * static_cast<size_t>(xt.stride) + 8, 0);
  rows.resize(yt.stride);
#ifdef SHARDCAST_RESAMPLE_X86
  if (isa != ResampleIsa::kScalar) PairedWeights(xt, crop, &paired);
  const HorizontalAvx2Fn horizontal_avx2 = PickHorizontalAvx2(xt.max_count);
#endif
  const size_t plane = static_cast<size_t>(crop) * crop;
  const size_t src_stride = static_cast<size_t>(image.width) * 3;
  const uint8_t* base = image.pixels.data() + static_cast<size_t>(xt.needed_lo - origin_x) * 3;
  for (int y = 0; y < crop; ++y) {
    const int16_t* w = yt.weights.data() + static_cast<size_t>(y) * yt.stride;
    const int n = yt.count[y];
    for (int k = 0; k < n; ++k) {
      rows[k] = base + static_cast<size_t>(yt.start[y] + k - origin_y) * src_stride;
    }
    uint8_t* r = out_chw + static_cast<size_t>(y) * crop;
    switch (isa) {
#ifdef SHARDCAST_RESAMPLE_X86
      case ResampleIsa::kAvx2:
        VerticalAvx2(rows.data(), w, n, span, row.data());
        horizontal_avx2(row.data(), xt, paired.data(), crop, t.flip, r, r + plane, r + 2 * plane);
        break;
      case ResampleIsa::kSsse3:
        VerticalSse2(rows.data(), w, n, span, row.data());
        HorizontalSsse3(row.data(), xt, paired.data(), crop, t.flip, r, r + plane, r + 2 * plane);
        break;
#endif
      default:
        VerticalScalar(rows.data(), w, n, 0, span, row.data());
        HorizontalScalar(row.data(), xt, crop, t.flip, r, r + plane, r + 2 * plane);
        break;
    }
  }
}

void SetResampleIsaForTest(ResampleIsa isa) { forced_isa = isa; }

}  // namespace internal
}  // namespace shardcast
