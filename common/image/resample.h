// Separable antialiased bilinear resampling (torchvision's resize with antialias=True)
// of an interleaved RGB region into planar uint8, in 16-bit fixed point with SIMD
// kernels chosen at run time (AVX-512BW, AVX2, SSSE3) and a scalar fallback of the same
// arithmetic.
#ifndef SHARDCAST_COMMON_IMAGE_RESAMPLE_H_
#define SHARDCAST_COMMON_IMAGE_RESAMPLE_H_

#include <cstdint>
#include <vector>

#include "common/image/image_types.h"

namespace shardcast {
namespace internal {

// One axis of the resample, with the semantics of torch's _upsample_bilinear2d_aa
// (aten/src/ATen/native/cpu/UpSampleKernel.cpp) and PIL's Resample.c: for output i,
// center = offset + (i + 0.5) * scale; a triangle filter whose support is `scale` when
// downscaling (else 1), window [center - support + 0.5, center + support + 0.5) clamped
// to [lo, hi), weights normalized to sum 1, then quantized to kWeightBits fixed point
// (summing exactly to 1 << kWeightBits).
struct AxisTaps {
  static constexpr int kWeightBits = 14;
  std::vector<int> start;        // first source index of output i
  std::vector<int> count;        // number of taps of output i
  std::vector<int16_t> weights;  // output i's weights at [i * stride, i * stride + stride)
  int stride = 0;                // even; weights past output i's taps are zero up to it
  int max_count = 0;             // the most taps any output has
  int needed_lo = 0;             // union of all windows: [needed_lo, needed_hi)
  int needed_hi = 0;
};

void ComputeTaps(double offset, double scale, int out_count, int lo, int hi, AxisTaps* t);

// Both axes' taps of one transform, in the coordinates of the whole image at the
// decode's DCT scale, and whether the output is mirrored.
struct ResampleTaps {
  AxisTaps x;
  AxisTaps y;
  bool flip = false;
};

// Resamples `image` through the taps into crop x crop planar RGB: a vertical pass per
// output row over only the needed columns into 16-bit fixed point, then a horizontal
// pass straight into the three output planes. `image` holds the rectangle of the whole
// (scaled) image whose top-left pixel is (origin_x, origin_y). REQUIRES: that rectangle
// covers [t.x.needed_lo, t.x.needed_hi) x [t.y.needed_lo, t.y.needed_hi).
void Resample(const RgbImage& image, int origin_x, int origin_y, const ResampleTaps& t, int crop,
              uint8_t* out_chw);

// Which kernels Resample uses: the best the CPU has (the default), or a lower one, so
// tests can check that every level gives the same bytes. Not thread-safe: tests only.
enum class ResampleIsa { kScalar, kSsse3, kAvx2, kAvx512, kBest };
void SetResampleIsaForTest(ResampleIsa isa);
// The best level this CPU runs (what kBest means), so a test can say what it compared.
ResampleIsa BestResampleIsa();
// Whether the AVX-512 level takes these taps through its planar passes (each group of 16
// outputs reads at most 64 source values, and crop >= 16); where not, it runs the AVX2
// passes.
bool PlanarPassTakes(const ResampleTaps& t, int crop);

}  // namespace internal
}  // namespace shardcast

#endif  // SHARDCAST_COMMON_IMAGE_RESAMPLE_H_
