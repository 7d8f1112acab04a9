// Transforms: conformance with torchvision (Resize+CenterCrop, resized_crop+hflip)
// on the same decoded pixels, RandomResizedCrop determinism and flip, DCT scaling.
#include "common/image/image_transform.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/image_test_util.h"

namespace shardcast {
namespace {

using ::testing::HasSubstr;
using testing_util::EncodeJpeg;
using testing_util::PhotoLike;

struct Diff {
  double mean = 0;
  int max = 0;
};

Diff Compare(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  Diff d;
  EXPECT_EQ(a.size(), b.size());
  if (a.size() != b.size() || a.empty()) return {1e9, 255};
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const int e = std::abs(int{a[i]} - int{b[i]});
    sum += e;
    d.max = std::max(d.max, e);
  }
  d.mean = sum / a.size();
  return d;
}

RgbImage DecodedPhoto(int w, int h, uint32_t seed) {
  const std::string jpeg = EncodeJpeg(PhotoLike(w, h, seed), w, h, TJSAMP_420, 90);
  return DecodeImage(jpeg).value();
}

std::vector<uint8_t> Center(const RgbImage& img, int resize, int crop) {
  std::vector<uint8_t> out(size_t{3} * crop * crop);
  TransformSpec spec;
  spec.resize = resize;
  spec.crop = crop;
  spec.dct_scaling = false;
  EXPECT_TRUE(ApplyTransform(img, spec, 0, out.data()).ok());
  return out;
}

// One torchvision job: the C++ side's input and result, the reference's output path.
struct Job {
  std::string label;
  std::string json;
  std::string output;
  std::vector<uint8_t> ours;
};

// Runs tests/reference/torchvision_transform.py over all jobs at once (one
// torch import) and compares; prints mean/max per job.
void RunAgainstTorchvision(const testing_util::TempDir& dir, std::vector<Job>& jobs) {
  std::string manifest = "[";
  for (size_t i = 0; i < jobs.size(); ++i) manifest += (i ? ",\n" : "") + jobs[i].json;
  manifest += "]";
  const std::string manifest_path = dir.path() + "/jobs.json";
  testing_util::WriteFile(manifest_path, manifest.data(), manifest.size());
  std::string log;
  const int rc = testing_util::RunCommand(
      std::string(REFERENCE_PYTHON) + " " +
          testing_util::ReferenceScript("torchvision_transform.py") + " " + manifest_path,
      &log);
  ASSERT_EQ(rc, 0) << log;
  for (Job& job : jobs) {
    const std::string ref = testing_util::ReadWholeFile(job.output);
    const Diff d = Compare(job.ours, std::vector<uint8_t>(ref.begin(), ref.end()));
    std::printf("[ conformance ] %-40s mean %.4f  max %d\n", job.label.c_str(), d.mean, d.max);
    EXPECT_LE(d.mean, 1.0) << job.label;
    EXPECT_LE(d.max, 2) << job.label;
  }
}

class TorchvisionConformanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing_util::PythonHas("torchvision")) {
      GTEST_SKIP() << REFERENCE_PYTHON << " cannot import torchvision (the reference)";
    }
  }
};

TEST_F(TorchvisionConformanceTest, ResizeAntialiasAndCenterCrop) {
  testing_util::TempDir dir;
  const int sizes[][2] = {{500, 375},  {375, 500}, {640, 480}, {256, 256},
                          {300, 1000}, {100, 80},  {257, 999}, {1023, 683}};
  const int specs[][2] = {{256, 224}, {72, 64}};
  std::vector<Job> jobs;
  int n = 0;
  for (const auto& sz : sizes) {
    const RgbImage img = DecodedPhoto(sz[0], sz[1], 100 + n);
    const std::string input = absl::StrFormat("%s/in%d.rgb", dir.path(), n);
    testing_util::WriteFile(input, img.pixels.data(), img.pixels.size());
    for (const auto& sc : specs) {
      Job job;
      job.label = absl::StrFormat("center %dx%d S=%d C=%d", sz[0], sz[1], sc[0], sc[1]);
      job.output = absl::StrFormat("%s/out%d_%d.chw", dir.path(), n, sc[0]);
      job.json = absl::StrFormat(
          R"({"op": "center", "input": "%s", "width": %d, "height": %d, "resize": %d, )"
          R"("crop": %d, "output": "%s"})",
          input, img.width, img.height, sc[0], sc[1], job.output);
      job.ours = Center(img, sc[0], sc[1]);
      jobs.push_back(job);
    }
    ++n;
  }
  RunAgainstTorchvision(dir, jobs);
}

TEST_F(TorchvisionConformanceTest, RandomResizedCropWithFlip) {
  testing_util::TempDir dir;
  const int sizes[][2] = {{500, 375}, {375, 500}, {300, 1000}, {100, 80}};
  std::vector<Job> jobs;
  int n = 0;
  for (const auto& sz : sizes) {
    const RgbImage img = DecodedPhoto(sz[0], sz[1], 200 + n);
    const std::string input = absl::StrFormat("%s/in%d.rgb", dir.path(), n);
    testing_util::WriteFile(input, img.pixels.data(), img.pixels.size());
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      const CropParams p = RandomResizedCropParams(img.width, img.height, seed * 7919 + n);
      Job job;
      job.label = absl::StrFormat("rrc %dx%d crop %dx%d@%d,%d%s", sz[0], sz[1], p.width, p.height,
                                  p.left, p.top, p.flip ? " flip" : "");
      job.output = absl::StrFormat("%s/rrc%d_%d.chw", dir.path(), n, seed);
      job.json = absl::StrFormat(
          R"({"op": "resized_crop", "input": "%s", "width": %d, "height": %d, "top": %d, )"
          R"("left": %d, "crop_height": %d, "crop_width": %d, "crop": 224, "flip": %s, )"
          R"("output": "%s"})",
          input, img.width, img.height, p.top, p.left, p.height, p.width, p.flip ? "true" : "false",
          job.output);
      job.ours.resize(3 * 224 * 224);
      ASSERT_TRUE(ResizedCropToChw(img, p, 224, job.ours.data()).ok());
      jobs.push_back(job);
    }
    ++n;
  }
  RunAgainstTorchvision(dir, jobs);
}

TEST(ImageTransformTest, DecodeAndTransformWithoutDctScalingEqualsDecodeThenTransform) {
  const int w = 500, h = 375;
  const std::string jpeg = EncodeJpeg(PhotoLike(w, h, 31), w, h, TJSAMP_420, 90);
  const RgbImage img = DecodeImage(jpeg).value();
  for (TransformMode mode : {TransformMode::kCenter, TransformMode::kRandom}) {
    TransformSpec spec;
    spec.mode = mode;
    spec.dct_scaling = false;
    std::vector<uint8_t> a(3 * 224 * 224), b(3 * 224 * 224);
    ASSERT_TRUE(ApplyTransform(img, spec, 77, a.data()).ok());
    ASSERT_TRUE(DecodeAndTransform(jpeg, spec, 77, b.data()).ok());
    EXPECT_EQ(a, b);
  }
}

TEST(ImageTransformTest, DctScaledOutputIsCloseToUnscaled) {
  // Sizes where a 1/2 or 1/4 DCT scale keeps the short side >= 256 (center)
  // or the crop region >= 224 (random).
  const int sizes[][2] = {{1024, 768}, {768, 1024}, {2048, 1365}, {600, 600}};
  for (const auto& sz : sizes) {
    const std::string jpeg = EncodeJpeg(PhotoLike(sz[0], sz[1], 41), sz[0], sz[1], TJSAMP_420, 90);
    for (TransformMode mode : {TransformMode::kCenter, TransformMode::kRandom}) {
      for (uint64_t seed : {1, 2, 3}) {
        TransformSpec spec;
        spec.mode = mode;
        spec.dct_scaling = true;
        std::vector<uint8_t> scaled(3 * 224 * 224), full(3 * 224 * 224);
        ASSERT_TRUE(DecodeAndTransform(jpeg, spec, seed, scaled.data()).ok());
        spec.dct_scaling = false;
        ASSERT_TRUE(DecodeAndTransform(jpeg, spec, seed, full.data()).ok());
        const Diff d = Compare(scaled, full);
        std::printf("[ dct scaling ] %4dx%-4d %s seed %d: mean %.3f max %d\n", sz[0], sz[1],
                    mode == TransformMode::kCenter ? "center" : "random", static_cast<int>(seed),
                    d.mean, d.max);
        // DCT downscaling is a different (box-like) low-pass than the triangle
        // filter, so not identical; it must still be the same picture.
        EXPECT_LT(d.mean, 3.0);
        if (mode == TransformMode::kCenter) break;  // seed is ignored
      }
    }
  }
}

TEST(ImageTransformTest, RandomIsDeterministicPerSeedAndVariesAcrossSeeds) {
  const int w = 500, h = 375;
  const std::string jpeg = EncodeJpeg(PhotoLike(w, h, 51), w, h, TJSAMP_420, 90);
  TransformSpec spec;
  spec.mode = TransformMode::kRandom;
  std::set<std::vector<uint8_t>> distinct;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    std::vector<uint8_t> a(3 * 224 * 224), b(3 * 224 * 224, 0xAB);
    ASSERT_TRUE(DecodeAndTransform(jpeg, spec, seed, a.data()).ok());
    ASSERT_TRUE(DecodeAndTransform(jpeg, spec, seed, b.data()).ok());
    EXPECT_EQ(a, b) << "seed " << seed;
    distinct.insert(a);
  }
  EXPECT_EQ(distinct.size(), 8u);
  // Pinned parameters: the PRNG stream is part of the resume contract (same
  // seed -> same bytes on any machine, any build), so a change must be deliberate.
  const CropParams p = RandomResizedCropParams(500, 375, 12345);
  std::printf("[ pinned ] seed 12345 on 500x375: %dx%d at (%d,%d) flip %d\n", p.width, p.height,
              p.left, p.top, p.flip);
  EXPECT_EQ(std::make_tuple(p.width, p.height, p.left, p.top, p.flip),
            std::make_tuple(179, 212, 56, 19, false));
}

TEST(ImageTransformTest, RandomParamsFollowTorchvisionDistribution) {
  const int w = 500, h = 375;
  int flips = 0;
  const int trials = 4000;
  double area_sum = 0;
  for (int seed = 0; seed < trials; ++seed) {
    const CropParams p = RandomResizedCropParams(w, h, seed);
    ASSERT_GT(p.width, 0);
    ASSERT_GT(p.height, 0);
    ASSERT_LE(p.left + p.width, w);
    ASSERT_LE(p.top + p.height, h);
    ASSERT_GE(p.left, 0);
    ASSERT_GE(p.top, 0);
    const double area = static_cast<double>(p.width) * p.height / (w * h);
    area_sum += area;
    EXPECT_GE(area, 0.075);  // 0.08 up to rounding of w and h
    const double ratio = static_cast<double>(p.width) / p.height;
    EXPECT_GE(ratio, 0.70);
    EXPECT_LE(ratio, 1.40);
    flips += p.flip;
  }
  EXPECT_NEAR(static_cast<double>(flips) / trials, 0.5, 0.04);
  // E[area] under the accepted draws is a bit under (0.08 + 1) / 2 = 0.54,
  // since large areas with extreme ratios get rejected.
  EXPECT_GT(area_sum / trials, 0.40);
  EXPECT_LT(area_sum / trials, 0.56);
  // Degenerate shapes fall back to the clamped-ratio centre crop.
  const CropParams thin = RandomResizedCropParams(2000, 10, 3);
  EXPECT_LE(thin.width, 2000);
  EXPECT_LE(thin.height, 10);
  EXPECT_GT(thin.width, 0);
}

TEST(ImageTransformTest, FlipMirrorsTheSameCrop) {
  const RgbImage img = DecodedPhoto(320, 240, 61);
  CropParams p{20, 30, 150, 200, false};
  std::vector<uint8_t> plain(3 * 64 * 64), mirrored(3 * 64 * 64);
  ASSERT_TRUE(ResizedCropToChw(img, p, 64, plain.data()).ok());
  p.flip = true;
  ASSERT_TRUE(ResizedCropToChw(img, p, 64, mirrored.data()).ok());
  EXPECT_NE(plain, mirrored);
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < 64; ++y) {
      for (int x = 0; x < 64; ++x) {
        ASSERT_EQ(plain[(c * 64 + y) * 64 + x], mirrored[(c * 64 + y) * 64 + 63 - x])
            << c << "," << y << "," << x;
      }
    }
  }
}

// A mode that is no enumerator (a cast from outside the enum) is refused before any
// pixel is touched, by both entry points, so their switches on the mode see only modes.
TEST(ImageTransformTest, AModeOutsideTheEnumIsRefused) {
  TransformSpec spec;
  spec.mode = static_cast<TransformMode>(7);
  spec.resize = 32;
  spec.crop = 16;
  std::vector<uint8_t> out(size_t{3} * spec.crop * spec.crop);
  absl::Status applied = ApplyTransform(DecodedPhoto(40, 30, 1), spec, 0, out.data());
  EXPECT_EQ(applied.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(applied.message(), "unknown transform mode 7");
  const std::string jpeg = EncodeJpeg(PhotoLike(40, 30, 1), 40, 30, TJSAMP_420, 90);
  absl::Status decoded = DecodeAndTransform(jpeg, spec, 0, out.data());
  EXPECT_EQ(decoded.message(), "unknown transform mode 7");
}

TEST(ImageTransformTest, EveryOutputByteIsWritten) {
  const std::string jpeg = EncodeJpeg(PhotoLike(333, 222, 71), 333, 222, TJSAMP_444, 90);
  for (TransformMode mode : {TransformMode::kCenter, TransformMode::kRandom}) {
    TransformSpec spec;
    spec.mode = mode;
    spec.resize = 160;
    spec.crop = 150;
    std::vector<uint8_t> zeros(3 * 150 * 150, 0x00), ones(3 * 150 * 150, 0xFF);
    ASSERT_TRUE(DecodeAndTransform(jpeg, spec, 5, zeros.data()).ok());
    ASSERT_TRUE(DecodeAndTransform(jpeg, spec, 5, ones.data()).ok());
    EXPECT_EQ(zeros, ones);
  }
}

TEST(ImageTransformTest, UniformImageStaysUniform) {
  // Weights are normalized: a flat colour passes through unchanged, at every
  // scale, including upscaling (100x80 -> 256) and heavy downscaling.
  for (const auto& sz : {std::pair{100, 80}, std::pair{2000, 1500}, std::pair{256, 256}}) {
    RgbImage img;
    img.width = sz.first;
    img.height = sz.second;
    img.pixels.resize(size_t{3} * img.width * img.height);
    for (size_t i = 0; i < img.pixels.size(); i += 3) {
      img.pixels[i] = 10;
      img.pixels[i + 1] = 128;
      img.pixels[i + 2] = 250;
    }
    const std::vector<uint8_t> out = Center(img, 256, 224);
    for (int i = 0; i < 224 * 224; ++i) {
      ASSERT_EQ(out[i], 10);
      ASSERT_EQ(out[224 * 224 + i], 128);
      ASSERT_EQ(out[2 * 224 * 224 + i], 250);
    }
  }
}

TEST(ImageTransformTest, OtherFormatsGoThroughDecodeAndTransform) {
  const int w = 300, h = 200;
  const std::vector<uint8_t> grey = PhotoLike(w, h, 81, 1);
  const std::vector<uint8_t> cmyk = PhotoLike(w, h, 82, 4);
  const std::string inputs[] = {
      EncodeJpeg(grey, w, h, TJSAMP_GRAY, 90, 0, TJPF_GRAY),
      EncodeJpeg(cmyk, w, h, TJSAMP_420, 90, 0, TJPF_CMYK),
      EncodeJpeg(PhotoLike(w, h, 83), w, h, TJSAMP_422, 90, TJFLAG_PROGRESSIVE),
      testing_util::EncodePng(PhotoLike(w, h, 84), w, h, PNG_COLOR_TYPE_RGB, 8),
  };
  for (const std::string& in : inputs) {
    for (TransformMode mode : {TransformMode::kCenter, TransformMode::kRandom}) {
      TransformSpec spec;
      spec.mode = mode;
      std::vector<uint8_t> out(3 * 224 * 224);
      EXPECT_TRUE(DecodeAndTransform(in, spec, 9, out.data()).ok());
    }
  }
}

TEST(ImageTransformTest, BadSpecsAndInputsAreErrors) {
  const std::string jpeg = EncodeJpeg(PhotoLike(64, 48, 91), 64, 48, TJSAMP_420, 90);
  std::vector<uint8_t> out(3 * 224 * 224);
  TransformSpec spec;
  spec.crop = 300;  // > resize 256
  absl::Status s = DecodeAndTransform(jpeg, spec, 0, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("crop 300 is larger than resize 256"));
  spec.crop = 0;
  EXPECT_FALSE(DecodeAndTransform(jpeg, spec, 0, out.data()).ok());
  spec.crop = 100000;
  EXPECT_FALSE(DecodeAndTransform(jpeg, spec, 0, out.data()).ok());
  spec = TransformSpec();
  EXPECT_FALSE(DecodeAndTransform(jpeg.substr(0, jpeg.size() - 100), spec, 0, out.data()).ok());
  EXPECT_FALSE(DecodeAndTransform("not an image", spec, 0, out.data()).ok());
  EXPECT_FALSE(ApplyTransform(RgbImage(), spec, 0, out.data()).ok());
  RgbImage img = DecodeImage(jpeg).value();
  EXPECT_FALSE(ResizedCropToChw(img, CropParams{0, 0, 49, 64, false}, 32, out.data()).ok());
  EXPECT_FALSE(ResizedCropToChw(img, CropParams{-1, 0, 10, 10, false}, 32, out.data()).ok());
  // Small images upscale (as torchvision does) rather than fail.
  EXPECT_TRUE(DecodeAndTransform(jpeg, spec, 0, out.data()).ok());
}

// Found by image_transform_fuzzer: a PNG header claiming 1 x 83,886,088 pixels (within
// the pixel limit) made Resize(31)'s long side 2.6e9, past int (undefined behaviour).
// Both entry points now refuse such an aspect ratio before any pixel exists.
TEST(ImageTransformTest, ExtremeAspectRatioIsRefusedNotOverflowed) {
  const std::string png_header(
      "\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\x05\0\0\x08\x10\0\0\0\0\xb1\xf4=f", 33);
  TransformSpec spec;
  spec.resize = 31;
  spec.crop = 16;
  std::vector<uint8_t> out(3 * 16 * 16);
  absl::Status s = DecodeAndTransform(png_header, spec, 0, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("aspect ratio too extreme"));

  RgbImage thin;
  thin.width = 1;
  thin.height = 70000;  // Resize(256): 17,920,000 pixels long
  thin.pixels.assign(3 * 70000, 7);
  spec = TransformSpec();
  out.assign(3 * 224 * 224, 0);
  s = ApplyTransform(thin, spec, 0, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  // A tall but reasonable image still transforms.
  thin.height = 60000;  // 15,360,000 pixels long: within the bound
  thin.pixels.assign(3 * 60000, 7);
  EXPECT_TRUE(ApplyTransform(thin, spec, 0, out.data()).ok());
}

}  // namespace
}  // namespace shardcast
