// Fixed-point separable resampling (Pillow-SIMD's approach): 14-bit weights, a vertical
// pass of uint8 rows into 16-bit values with 7 fractional bits, and a horizontal pass
// into uint8 planes. Every kernel level computes exactly the same integers, so the
// dispatch never changes the bytes.
#include "common/image/resample.h"

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

// ------------------------------------------------------------ AVX-512: planar passes
// With AVX-512BW the vertical pass writes its output as three planes (R, G, B int16
// rows), and the horizontal pass gathers each output's taps from a window of 64 values
// of one plane with a two-register word permute (vpermt2w): 16 outputs of one channel
// per step, every multiply lane useful, no per-pixel shuffles. The same integers as
// the passes above, in the same order of operations per output, so the same bytes.

constexpr int kPlanarGroup = 16;    // outputs per horizontal step (16 int32 lanes)
constexpr int kPlanarWindow = 64;   // values one permute can pick from (two registers)
constexpr int kPlanarChunk = 32;    // pixels per vertical step (96 int16 values)
constexpr int kMaxPlanarPairs = 4;  // tap pairs per axis (8 taps), fixed at compile time

// The horizontal taps in the permute's terms, per group of 16 consecutive outputs
// starting at GroupStart(g): the group's window starts at plane value base[g], and for
// tap pair j, lane pair (2i, 2i + 1) of index/weight picks output i's taps 2j, 2j + 1.
struct PlanarTaps {
  int groups = 0;
  int pairs = 0;
  std::vector<int> base;
  std::vector<int> at;          // the group's first output byte in the row (mirrored: flip)
  std::vector<int16_t> index;   // [(g * pairs + j) * 32 + lane]
  std::vector<int16_t> weight;  // same layout
};

// The last group is moved left to end at the crop (it recomputes a few outputs of the
// one before, with the same result), so every group has 16 real outputs.
int GroupStart(int g, int crop) { return std::min(g * kPlanarGroup, crop - kPlanarGroup); }

// False when the planar passes cannot take these taps: a crop under 16, more than 8 taps
// on an axis, or a group whose taps span more than the 64 values one permute reaches (a
// large downscale).
bool BuildPlanarTaps(const ResampleTaps& t, int crop, PlanarTaps* pt) {
  const AxisTaps& xt = t.x;
  const bool flip = t.flip;
  if (crop < kPlanarGroup || (xt.max_count + 1) / 2 > kMaxPlanarPairs ||
      (t.y.max_count + 1) / 2 > kMaxPlanarPairs) {
    return false;
  }
  pt->groups = (crop + kPlanarGroup - 1) / kPlanarGroup;
  pt->pairs = (xt.max_count + 1) / 2;
  const size_t lanes = static_cast<size_t>(pt->groups) * pt->pairs * 2 * kPlanarGroup;
  pt->base.resize(pt->groups);
  pt->at.resize(pt->groups);
  pt->index.resize(lanes);
  pt->weight.resize(lanes);
  for (int g = 0; g < pt->groups; ++g) {
    const int x0 = GroupStart(g, crop);
    const int base = xt.start[x0] - xt.needed_lo;
    pt->base[g] = base;
    pt->at[g] = flip ? crop - kPlanarGroup - x0 : x0;
    for (int i = 0; i < kPlanarGroup; ++i) {
      const int x = x0 + i;
      const int rel = xt.start[x] - xt.needed_lo - base;  // starts never decrease
      const int16_t* w = xt.weights.data() + static_cast<size_t>(x) * xt.stride;
      for (int k = 0; k < 2 * pt->pairs; ++k) {
        const int16_t weight = k < xt.stride ? w[k] : 0;
        if (weight != 0 && rel + k >= kPlanarWindow) return false;
        // A zero-weight tap past the window reads any value in it.
        const size_t lane =
            (static_cast<size_t>(g) * pt->pairs + k / 2) * 2 * kPlanarGroup + 2 * i + (k & 1);
        pt->index[lane] = static_cast<int16_t>(std::min(rel + k, kPlanarWindow - 1));
        pt->weight[lane] = weight;
      }
    }
  }
  return true;
}

#define SHARDCAST_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

// Plane c's pixel i of a 32-pixel chunk is flat value 3i + c of the chunk's three
// registers: from the first two through one permute, from the third through a masked one.
struct Deinterleave {
  __m512i first[3], third[3];
  __mmask32 from_third[3];
};

SHARDCAST_AVX512 Deinterleave MakeDeinterleave() {
  Deinterleave d;
  for (int c = 0; c < 3; ++c) {
    alignas(64) int16_t first[32], third[32];
    uint32_t mask = 0;
    for (int i = 0; i < 32; ++i) {
      const int f = 3 * i + c;
      first[i] = static_cast<int16_t>(f < 64 ? f : 0);
      third[i] = static_cast<int16_t>(f < 64 ? 0 : f - 64);
      if (f >= 64) mask |= 1u << i;
    }
    d.first[c] = _mm512_load_si512(first);
    d.third[c] = _mm512_load_si512(third);
    d.from_third[c] = _cvtu32_mask32(mask);
  }
  return d;
}

// 32 values of one vertical output row at flat offset `at`, in order: the widened bytes
// interleaved per 128-bit lane by unpack, and put back in order by packs, as in
// VerticalAvx2. `rows` has an even number of entries (an odd last tap is paired with
// its own row, weighted 0), `wk` each pair's TapPair broadcast. kMasked: only the bytes
// in `mask` are read (the row's end), the others give zeros.
template <int kPairs, bool kMasked>
SHARDCAST_AVX512 inline __m512i Vertical32Avx512(const uint8_t* const* rows, const __m512i* wk,
                                                 int at, __mmask32 mask) {
  const __m512i round = _mm512_set1_epi32(1 << (kVerticalShift - 1));
  __m512i acc0 = round, acc1 = round;
  for (int j = 0; j < kPairs; ++j) {
    const uint8_t* ra = rows[2 * j] + at;
    const uint8_t* rb = rows[2 * j + 1] + at;
    const __m256i a8 = kMasked ? _mm256_maskz_loadu_epi8(mask, ra)
                               : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ra));
    const __m256i b8 = kMasked ? _mm256_maskz_loadu_epi8(mask, rb)
                               : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rb));
    const __m512i a = _mm512_cvtepu8_epi16(a8), b = _mm512_cvtepu8_epi16(b8);
    acc0 = _mm512_add_epi32(acc0, _mm512_madd_epi16(_mm512_unpacklo_epi16(a, b), wk[j]));
    acc1 = _mm512_add_epi32(acc1, _mm512_madd_epi16(_mm512_unpackhi_epi16(a, b), wk[j]));
  }
  const __mmask16 all = _cvtu32_mask16(0xFFFF);  // see HorizontalPlanarAvx512
  return _mm512_packs_epi32(_mm512_maskz_srai_epi32(all, acc0, kVerticalShift),
                            _mm512_maskz_srai_epi32(all, acc1, kVerticalShift));
}

// The first min(left, 32) of 32 bytes (none when left <= 0).
SHARDCAST_AVX512 inline __mmask32 BytesLeft(int left) {
  return _cvtu32_mask32(left >= 32 ? ~0u : left <= 0 ? 0u : (1u << left) - 1);
}

// One 32-pixel chunk (96 values) of the vertical pass, split into the three planes.
template <int kPairs, bool kMasked>
SHARDCAST_AVX512 inline void VerticalChunkAvx512(const uint8_t* const* rows, const __m512i* wk,
                                                 int px, int n, const Deinterleave& d,
                                                 int16_t* const planes[3]) {
  const int at = px * 3;
  const __m512i z0 = Vertical32Avx512<kPairs, kMasked>(rows, wk, at, BytesLeft(n - at));
  const __m512i z1 = Vertical32Avx512<kPairs, kMasked>(rows, wk, at + 32, BytesLeft(n - at - 32));
  const __m512i z2 = Vertical32Avx512<kPairs, kMasked>(rows, wk, at + 64, BytesLeft(n - at - 64));
  for (int c = 0; c < 3; ++c) {
    const __m512i plane = _mm512_mask_permutexvar_epi16(
        _mm512_permutex2var_epi16(z0, d.first[c], z1), d.from_third[c], d.third[c], z2);
    _mm512_storeu_si512(planes[c] + px, plane);
  }
}

// The vertical pass over `span` interleaved pixels into the three planes, written up to
// the next multiple of 32 pixels.
template <int kPairs>
SHARDCAST_AVX512 void VerticalPlanarAvx512(const uint8_t* const* rows, const int16_t* w, int taps,
                                           int span, const Deinterleave& d,
                                           int16_t* const planes[3]) {
  __m512i wk[kPairs];
  for (int j = 0; j < kPairs; ++j) wk[j] = _mm512_set1_epi32(TapPair(w, 2 * j, 2 * j + 1 < taps));
  const int n = span * 3;
  int px = 0;
  for (; (px + kPlanarChunk) * 3 <= n; px += kPlanarChunk) {
    VerticalChunkAvx512<kPairs, false>(rows, wk, px, n, d, planes);
  }
  if (px < span) VerticalChunkAvx512<kPairs, true>(rows, wk, px, n, d, planes);
}

// One output row from the three planes: per group, its taps' indices and weights are
// loaded once for the three channels. `at` is each group's first output byte (mirrored
// when kFlip, whose bytes are then reversed).
template <int kPairs, bool kFlip>
SHARDCAST_AVX512 void HorizontalPlanarAvx512(const int16_t* const planes[3], const PlanarTaps& pt,
                                             uint8_t* const out[3]) {
  const __m512i round = _mm512_set1_epi32(1 << (kHorizontalShift - 1));
  const __m512i zero = _mm512_setzero_si512();
  // The zero-masking forms with every lane kept: GCC 12 warns of the unmasked ones'
  // undefined source operand (bug 105593).
  const __mmask16 all = _cvtu32_mask16(0xFFFF);
  const __m128i reverse = _mm_setr_epi8(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const int* const base = pt.base.data();
  const int* const at = pt.at.data();
  const __m512i* const index = reinterpret_cast<const __m512i*>(pt.index.data());
  const __m512i* const weight = reinterpret_cast<const __m512i*>(pt.weight.data());
  const int groups = pt.groups;
  for (int g = 0; g < groups; ++g) {
    __m512i idx[kPairs], wt[kPairs];
    for (int j = 0; j < kPairs; ++j) {
      idx[j] = _mm512_loadu_si512(index + g * kPairs + j);
      wt[j] = _mm512_loadu_si512(weight + g * kPairs + j);
    }
    for (int c = 0; c < 3; ++c) {
      const int16_t* window = planes[c] + base[g];
      const __m512i lo = _mm512_loadu_si512(window);
      const __m512i hi = _mm512_loadu_si512(window + 32);
      __m512i acc = round;
      for (int j = 0; j < kPairs; ++j) {
        acc = _mm512_add_epi32(acc,
                               _mm512_madd_epi16(_mm512_permutex2var_epi16(lo, idx[j], hi), wt[j]));
      }
      // Clamped to [0, 255]: max with 0, then the unsigned saturating narrow.
      __m128i bytes = _mm512_maskz_cvtusepi32_epi8(
          all,
          _mm512_maskz_max_epi32(all, _mm512_maskz_srai_epi32(all, acc, kHorizontalShift), zero));
      if (kFlip) bytes = _mm_shuffle_epi8(bytes, reverse);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out[c] + at[g]), bytes);
    }
  }
}

using VerticalPlanarFn = void (*)(const uint8_t* const*, const int16_t*, int, int,
                                  const Deinterleave&, int16_t* const[3]);
using HorizontalPlanarFn = void (*)(const int16_t* const[3], const PlanarTaps&, uint8_t* const[3]);

VerticalPlanarFn PickVerticalPlanar(int pairs) {
  static constexpr VerticalPlanarFn kByPairs[] = {VerticalPlanarAvx512<1>, VerticalPlanarAvx512<2>,
                                                  VerticalPlanarAvx512<3>, VerticalPlanarAvx512<4>};
  return kByPairs[pairs - 1];
}

HorizontalPlanarFn PickHorizontalPlanar(int pairs, bool flip) {
  static constexpr HorizontalPlanarFn kByPairs[][2] = {
      {HorizontalPlanarAvx512<1, false>, HorizontalPlanarAvx512<1, true>},
      {HorizontalPlanarAvx512<2, false>, HorizontalPlanarAvx512<2, true>},
      {HorizontalPlanarAvx512<3, false>, HorizontalPlanarAvx512<3, true>},
      {HorizontalPlanarAvx512<4, false>, HorizontalPlanarAvx512<4, true>}};
  return kByPairs[pairs - 1][flip ? 1 : 0];
}

// The whole resample through the planar passes; false (nothing written) when the taps
// do not fit them (BuildPlanarTaps).
SHARDCAST_AVX512 bool ResamplePlanarAvx512(const uint8_t* base, size_t src_stride, int origin_y,
                                           const ResampleTaps& t, int crop, uint8_t* out_chw) {
  const AxisTaps& yt = t.y;
  thread_local PlanarTaps pt;
  if (!BuildPlanarTaps(t, crop, &pt)) return false;
  static const Deinterleave deinterleave = MakeDeinterleave();
  const int span = t.x.needed_hi - t.x.needed_lo;
  // The vertical pass writes whole chunks; a window reads up to 64 values from its base.
  const size_t plane_len =
      static_cast<size_t>((span + kPlanarChunk - 1) / kPlanarChunk * kPlanarChunk) + kPlanarWindow;
  thread_local std::vector<int16_t> buffer;
  thread_local std::vector<const uint8_t*> rows;
  if (buffer.size() < 3 * plane_len) buffer.resize(3 * plane_len);
  int16_t* const planes[3] = {buffer.data(), buffer.data() + plane_len,
                              buffer.data() + 2 * plane_len};
  // Values past the chunks are read by windows near the right edge with zero weight;
  // zeroed so they are defined.
  for (int16_t* p : planes) std::fill_n(p + plane_len - kPlanarWindow, kPlanarWindow, 0);
  rows.resize(yt.stride + 1);
  const HorizontalPlanarFn horizontal = PickHorizontalPlanar(pt.pairs, t.flip);
  const size_t plane = static_cast<size_t>(crop) * crop;
  for (int y = 0; y < crop; ++y) {
    const int n = yt.count[y];
    for (int k = 0; k < n; ++k) {
      rows[k] = base + static_cast<size_t>(yt.start[y] + k - origin_y) * src_stride;
    }
    rows[n] = rows[n - 1];  // an odd last tap's pair (weight 0)
    const int pairs = (n + 1) / 2;
    PickVerticalPlanar(pairs)(rows.data(), yt.weights.data() + static_cast<size_t>(y) * yt.stride,
                              n, span, deinterleave, planes);
    uint8_t* r = out_chw + static_cast<size_t>(y) * crop;
    uint8_t* const out[3] = {r, r + plane, r + 2 * plane};
    horizontal(planes, pt, out);
  }
  return true;
}
#undef SHARDCAST_AVX512
#endif  // SHARDCAST_RESAMPLE_X86

ResampleIsa BestIsa() {
#ifdef SHARDCAST_RESAMPLE_X86
  // The AVX2 level also runs SSSE3 code (every AVX2 CPU has it): the last crop % 8
  // outputs of a row; the AVX-512 level runs the AVX2 one for taps it cannot take.
  static const ResampleIsa best =
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")
          ? ResampleIsa::kAvx512
      : __builtin_cpu_supports("avx2")  ? ResampleIsa::kAvx2
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
  thread_local std::vector<double> w;  // a window's raw weights, kept between calls
  if (w.size() < static_cast<size_t>(window)) w.resize(window);
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
      // Round half up, as lround for these non-negative values, without its libm call.
      // NOLINTNEXTLINE(bugprone-incorrect-roundings): the weights are never negative
      q[k] = static_cast<int16_t>(w[k] / total * kOne + 0.5);
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
  const size_t src_stride = static_cast<size_t>(image.width) * 3;
  const uint8_t* base = image.pixels.data() + static_cast<size_t>(xt.needed_lo - origin_x) * 3;
  ResampleIsa isa = CurrentIsa();
#ifdef SHARDCAST_RESAMPLE_X86
  if (isa == ResampleIsa::kAvx512) {
    if (ResamplePlanarAvx512(base, src_stride, origin_y, t, crop, out_chw)) return;
    isa = ResampleIsa::kAvx2;
  }
#endif
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

ResampleIsa BestResampleIsa() { return BestIsa(); }

bool PlanarPassTakes(const ResampleTaps& t, int crop) {
#ifdef SHARDCAST_RESAMPLE_X86
  PlanarTaps pt;
  return BuildPlanarTaps(t, crop, &pt);
#else
  return false;
#endif
}

}  // namespace internal
}  // namespace shardcast
