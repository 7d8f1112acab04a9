// Encoded delivery's contract at the image library: the crop the server plans
// (PlanEncodedSample) applied by a client (DecodeWithCrop) gives DecodeAndTransform's
// bytes, for every format, subsampling and transform, with and without DCT scaling;
// and a crop from the wire that does not fit its image is refused, not read past.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/image/image_transform.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/image_test_util.h"

namespace shardcast {
namespace {

using ::testing::HasSubstr;
using testing_util::EncodeJpeg;
using testing_util::EncodePng;
using testing_util::EncodeWebp;
using testing_util::PhotoLike;

struct Case {
  std::string name;
  std::string bytes;
};

std::vector<Case> Images() {
  std::vector<Case> cases;
  const int sizes[][2] = {{500, 375}, {333, 517}, {257, 257}, {1024, 683}};
  uint32_t seed = 1;
  for (const auto& size : sizes) {
    const int w = size[0], h = size[1];
    const std::vector<uint8_t> px = PhotoLike(w, h, seed++);
    for (int subsamp : {TJSAMP_444, TJSAMP_422, TJSAMP_420}) {
      cases.push_back(
          {absl::StrFormat("jpeg%dx%d_s%d", w, h, subsamp), EncodeJpeg(px, w, h, subsamp)});
    }
    cases.push_back({absl::StrFormat("progressive%dx%d", w, h),
                     EncodeJpeg(px, w, h, TJSAMP_420, 85, TJFLAG_PROGRESSIVE)});
    cases.push_back(
        {absl::StrFormat("png%dx%d", w, h), EncodePng(px, w, h, PNG_COLOR_TYPE_RGB, 8)});
    cases.push_back(
        {absl::StrFormat("webp%dx%d", w, h), EncodeWebp(px, w, h, 3, /*lossless=*/false)});
  }
  return cases;
}

TEST(EncodedCropTest, PlannedCropDecodedByTheClientEqualsTheServersBytes) {
  int compared = 0;
  for (const Case& c : Images()) {
    for (TransformMode mode : {TransformMode::kCenter, TransformMode::kRandom}) {
      for (bool dct : {false, true}) {
        for (uint64_t seed : {uint64_t{7}, uint64_t{1234567}, uint64_t{99}}) {
          TransformSpec spec;
          spec.mode = mode;
          spec.resize = 160;
          spec.crop = 128;
          spec.dct_scaling = dct;
          std::vector<uint8_t> server(3 * 128 * 128, 1), client(3 * 128 * 128, 2);
          ASSERT_TRUE(DecodeAndTransform(c.bytes, spec, seed, server.data()).ok()) << c.name;
          absl::StatusOr<EncodedPlan> plan = PlanEncodedSample(c.bytes, spec, seed);
          ASSERT_TRUE(plan.ok()) << c.name << ": " << plan.status();
          EXPECT_EQ(plan->crop.source_width, plan->info.width);
          ASSERT_TRUE(DecodeWithCrop(c.bytes, plan->crop, dct, client.data()).ok()) << c.name;
          EXPECT_EQ(server, client) << c.name << " mode " << TransformModeName(mode) << " dct "
                                    << dct << " seed " << seed;
          ++compared;
          if (mode == TransformMode::kCenter) break;  // the seed changes nothing
        }
      }
    }
  }
  EXPECT_GT(compared, 150);
}

TEST(EncodedCropTest, ApplyCropOnDecodedPixelsEqualsApplyTransform) {
  const std::vector<uint8_t> px = PhotoLike(300, 200, 9);
  const std::string png = EncodePng(px, 300, 200, PNG_COLOR_TYPE_RGB, 8);
  absl::StatusOr<RgbImage> image = DecodeImage(png);
  ASSERT_TRUE(image.ok());
  for (TransformMode mode : {TransformMode::kCenter, TransformMode::kRandom}) {
    TransformSpec spec;
    spec.mode = mode;
    spec.resize = 100;
    spec.crop = 80;
    absl::StatusOr<SampleCrop> crop = PlanSampleCrop(300, 200, spec, 5);
    ASSERT_TRUE(crop.ok());
    std::vector<uint8_t> a(3 * 80 * 80), b(3 * 80 * 80);
    ASSERT_TRUE(ApplyTransform(*image, spec, 5, a.data()).ok());
    ASSERT_TRUE(ApplyCrop(*image, *crop, b.data()).ok());
    EXPECT_EQ(a, b) << TransformModeName(mode);
  }
}

TEST(EncodedCropTest, TheSourceRectReadHoldsTheCropWindow) {
  const std::vector<uint8_t> px = PhotoLike(640, 480, 3);
  const std::string jpeg = EncodeJpeg(px, 640, 480, TJSAMP_420);
  TransformSpec spec;
  spec.mode = TransformMode::kRandom;
  spec.crop = 96;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    absl::StatusOr<EncodedPlan> plan = PlanEncodedSample(jpeg, spec, seed);
    ASSERT_TRUE(plan.ok());
    absl::StatusOr<SourceRect> read = SourcePixelsRead(plan->info, plan->crop, false);
    ASSERT_TRUE(read.ok());
    const SampleCrop& c = plan->crop;
    EXPECT_LE(read->left, c.left);
    EXPECT_LE(read->top, c.top);
    EXPECT_GE(read->left + read->width, c.left + c.width);
    EXPECT_GE(read->top + read->height, c.top + c.height);
    EXPECT_LE(read->left + read->width, 640);
    EXPECT_LE(read->top + read->height, 480);
  }
}

TEST(EncodedCropTest, ACropThatDoesNotFitItsImageIsRefused) {
  const std::vector<uint8_t> px = PhotoLike(200, 150, 5);
  const std::string jpeg = EncodeJpeg(px, 200, 150, TJSAMP_420);
  TransformSpec spec;
  spec.mode = TransformMode::kRandom;
  spec.crop = 64;
  absl::StatusOr<EncodedPlan> plan = PlanEncodedSample(jpeg, spec, 11);
  ASSERT_TRUE(plan.ok());
  std::vector<uint8_t> out(3 * 64 * 64);

  SampleCrop wrong_size = plan->crop;
  wrong_size.source_width = 400;
  EXPECT_THAT(DecodeWithCrop(jpeg, wrong_size, false, out.data()).message(),
              HasSubstr("header says 200x150"));

  SampleCrop outside = plan->crop;
  outside.left = 190;
  outside.width = 50;
  EXPECT_THAT(DecodeWithCrop(jpeg, outside, false, out.data()).message(), HasSubstr("not inside"));

  SampleCrop huge_output = plan->crop;
  huge_output.output = 100000;
  EXPECT_FALSE(DecodeWithCrop(jpeg, huge_output, false, out.data()).ok());

  SampleCrop center = plan->crop;
  center.mode = TransformMode::kCenter;
  center.resize_width = 80;
  center.resize_height = 60;
  center.width = center.height = 64;
  EXPECT_THAT(DecodeWithCrop(jpeg, center, false, out.data()).message(), HasSubstr("not inside"));

  SourceWindow cut{8, 0, 100, 150};  // the header says 200x150, not a 100x150 cut
  EXPECT_THAT(DecodeWithCrop(jpeg, plan->crop, false, out.data(), nullptr, &cut).message(),
              HasSubstr("header says"));
}

}  // namespace
}  // namespace shardcast
