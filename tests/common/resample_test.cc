// The fixed-point resampler: every kernel level (scalar, SSSE3, AVX2, AVX-512) gives the
// same bytes, the weights are exact, and a uniform image stays uniform at the extremes.
#include "common/image/resample.h"

#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "common/image/image_transform.h"
#include "gtest/gtest.h"

namespace shardcast::internal {
namespace {

RgbImage Noise(int w, int h, uint32_t seed) {
  std::mt19937 rng(seed);
  RgbImage img;
  img.width = w;
  img.height = h;
  img.pixels.resize(static_cast<size_t>(w) * h * 3);
  // Noise at the extremes too, where saturation and overflow would show.
  for (uint8_t& p : img.pixels) {
    const uint32_t v = rng() % 300;
    p = static_cast<uint8_t>(v < 20 ? 0 : v > 280 ? 255 : v - 20);
  }
  return img;
}

class ResampleIsaTest : public ::testing::Test {
 protected:
  void TearDown() override { SetResampleIsaForTest(ResampleIsa::kBest); }
};

TEST_F(ResampleIsaTest, EveryKernelLevelGivesTheScalarBytes) {
  const int sizes[][2] = {{500, 375}, {375, 500}, {97, 61}, {1024, 683}, {40, 30}};
  int compared = 0;
  for (const auto& sz : sizes) {
    const RgbImage img = Noise(sz[0], sz[1], sz[0] * 7 + sz[1]);
    for (TransformMode mode : {TransformMode::kCenter, TransformMode::kRandom}) {
      for (const auto& [resize, crop] : {std::pair{256, 224}, std::pair{72, 64}, std::pair{33, 33},
                                         std::pair{40, 29}, std::pair{12, 7}}) {
        // The AVX2 pass writes eight outputs per step and the rest one at a time: crops
        // of 8k (224, 64), 8k + 1 (33), 8k + 5 (29) and under 8 (7), each mirrored too.
        for (uint64_t seed = 0; seed < 4; ++seed) {
          TransformSpec spec;
          spec.mode = mode;
          spec.resize = resize;
          spec.crop = crop;
          std::vector<uint8_t> scalar(size_t{3} * crop * crop), simd(scalar.size());
          SetResampleIsaForTest(ResampleIsa::kScalar);
          ASSERT_TRUE(ApplyTransform(img, spec, seed, scalar.data()).ok());
          for (ResampleIsa isa : {ResampleIsa::kSsse3, ResampleIsa::kAvx2, ResampleIsa::kAvx512}) {
            SetResampleIsaForTest(isa);
            ASSERT_TRUE(ApplyTransform(img, spec, seed, simd.data()).ok());
            ASSERT_EQ(scalar, simd) << sz[0] << "x" << sz[1] << " crop " << crop << " isa "
                                    << static_cast<int>(isa) << " seed " << seed;
            ++compared;
          }
          if (mode == TransformMode::kCenter) break;
        }
      }
    }
  }
  EXPECT_EQ(compared, 5 * 5 * (1 + 4) * 3);
}

// The AVX-512 level compared above is the planar pass wherever it takes the taps: an
// ImageNet-sized photo's center crop and a random crop up to a 3x downscale, not a
// large downscale (a group's taps span more than one permute's 64 values) or a crop
// under 16, which run the AVX2 passes.
TEST(ResampleTest, PlanarPassTakesTheCommonCropsAndDeclinesWideOnes) {
  ResampleTaps t;
  ComputeTaps(58.0 * 375 / 256, 375.0 / 256, 224, 0, 500, &t.x);  // 500x375, 256/224
  EXPECT_TRUE(PlanarPassTakes(t, 224));
  ComputeTaps(10.0, 3.0, 224, 0, 700, &t.x);  // a random crop 672 px wide
  EXPECT_TRUE(PlanarPassTakes(t, 224));
  ComputeTaps(0.0, 1024.0 / 7, 7, 0, 1024, &t.x);
  EXPECT_FALSE(PlanarPassTakes(t, 7));
  ComputeTaps(0.0, 4.0, 224, 0, 1000, &t.x);  // 16 outputs span 64 + 8 values
  EXPECT_FALSE(PlanarPassTakes(t, 224));
  std::printf("best resampler level on this CPU: %d (3 = AVX-512)\n",
              static_cast<int>(BestResampleIsa()));
}

TEST(ResampleTest, WeightsSumToExactlyOneAndCoverTheNeededRange) {
  for (double scale : {0.3, 1.0, 1.4648, 2.0, 7.9}) {
    AxisTaps t;
    ComputeTaps(3.25, scale, 50, 0, static_cast<int>(50 * scale) + 8, &t);
    EXPECT_EQ(t.stride % 2, 0);
    for (int i = 0; i < 50; ++i) {
      const int16_t* w = t.weights.data() + static_cast<size_t>(i) * t.stride;
      EXPECT_EQ(std::accumulate(w, w + t.stride, 0), 1 << AxisTaps::kWeightBits) << scale;
      for (int k = 0; k < t.stride; ++k) EXPECT_GE(w[k], 0);
      EXPECT_GE(t.start[i], t.needed_lo);
      EXPECT_LE(t.start[i] + t.count[i], t.needed_hi);
    }
  }
}

TEST_F(ResampleIsaTest, UniformExtremesStayExact) {
  for (ResampleIsa isa :
       {ResampleIsa::kScalar, ResampleIsa::kSsse3, ResampleIsa::kAvx2, ResampleIsa::kAvx512}) {
    SetResampleIsaForTest(isa);
    for (uint8_t v : {uint8_t{0}, uint8_t{1}, uint8_t{254}, uint8_t{255}}) {
      RgbImage img;
      img.width = 333;
      img.height = 251;
      img.pixels.assign(size_t{333} * 251 * 3, v);
      TransformSpec spec;
      std::vector<uint8_t> out(3 * 224 * 224);
      ASSERT_TRUE(ApplyTransform(img, spec, 0, out.data()).ok());
      for (uint8_t o : out) ASSERT_EQ(o, v) << "isa " << static_cast<int>(isa);
    }
  }
}

}  // namespace
}  // namespace shardcast::internal
