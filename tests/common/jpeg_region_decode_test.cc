// Region-of-interest JPEG decoding: bit-identical to the same rectangle of the whole
// TurboJPEG decode for every chroma subsampling and DCT scale, the transforms over it
// identical to the whole-image path, and bad data refused with a Status.
#include "common/image/jpeg_region_decode.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/image/image_decode_internal.h"
#include "common/image/image_transform.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/image_test_util.h"

namespace shardcast::internal {
namespace {

using ::testing::HasSubstr;
using testing_util::EncodeJpeg;
using testing_util::PhotoLike;

struct Encoded {
  std::string label;
  std::string jpeg;
};

// Sizes that are not multiples of the iMCU (edge blocks are padded), every sampling
// libjpeg-turbo writes, and greyscale.
std::vector<Encoded> Inputs() {
  std::vector<Encoded> inputs;
  const int sizes[][2] = {{333, 251}, {250, 413}, {97, 61}};
  const std::pair<int, const char*> samplings[] = {{TJSAMP_444, "444"},
                                                   {TJSAMP_422, "422"},
                                                   {TJSAMP_420, "420"},
                                                   {TJSAMP_440, "440"},
                                                   {TJSAMP_411, "411"}};
  uint32_t seed = 500;
  for (const auto& sz : sizes) {
    for (const auto& [samp, name] : samplings) {
      inputs.push_back({absl::StrFormat("%dx%d %s", sz[0], sz[1], name),
                        EncodeJpeg(PhotoLike(sz[0], sz[1], ++seed), sz[0], sz[1], samp, 85)});
    }
    inputs.push_back({absl::StrFormat("%dx%d grey", sz[0], sz[1]),
                      EncodeJpeg(PhotoLike(sz[0], sz[1], ++seed, 1), sz[0], sz[1], TJSAMP_GRAY, 85,
                                 0, TJPF_GRAY)});
  }
  return inputs;
}

ImageInfo Info(const std::string& jpeg) { return ReadImageInfo(jpeg).value(); }

TEST(JpegRegionDecodeTest, RegionIsBitIdenticalToTheWholeDecode) {
  std::mt19937 rng(7);
  for (const Encoded& in : Inputs()) {
    ASSERT_TRUE(RegionDecodable(Info(in.jpeg), in.jpeg)) << in.label;
    for (const ScalingFactor f : {ScalingFactor{1, 1}, ScalingFactor{1, 2}, ScalingFactor{1, 4},
                                  ScalingFactor{1, 8}, ScalingFactor{3, 4}}) {
      RgbImage whole;
      ASSERT_TRUE(DecodeInto(in.jpeg, f, &whole).ok()) << in.label;
      const int w = whole.width, h = whole.height;
      // Corners, edges, the middle and random rectangles, from one pixel to all.
      std::vector<PixelRect> rects = {{0, 0, w, h},         {0, 0, 1, 1},
                                      {w - 1, h - 1, 1, 1}, {w / 3, h / 3, w / 3 + 1, h / 3 + 1},
                                      {0, h / 2, w, 1},     {w / 2, 0, 1, h}};
      for (int i = 0; i < 12; ++i) {
        PixelRect r;
        r.x = std::uniform_int_distribution<int>(0, w - 1)(rng);
        r.y = std::uniform_int_distribution<int>(0, h - 1)(rng);
        r.width = std::uniform_int_distribution<int>(1, w - r.x)(rng);
        r.height = std::uniform_int_distribution<int>(1, h - r.y)(rng);
        rects.push_back(r);
      }
      for (const PixelRect& want : rects) {
        RgbImage part;
        PixelRect got;
        const absl::Status s = DecodeJpegRegion(in.jpeg, f, want, &part, &got);
        ASSERT_TRUE(s.ok()) << in.label << ": " << s;
        const std::string where = absl::StrFormat(
            "%s at %d/%d: want %dx%d+%d+%d, got %dx%d+%d+%d", in.label, f.num, f.denom, want.width,
            want.height, want.x, want.y, got.width, got.height, got.x, got.y);
        ASSERT_LE(got.x, want.x) << where;
        ASSERT_LE(got.y, want.y) << where;
        ASSERT_GE(got.x + got.width, want.x + want.width) << where;
        ASSERT_GE(got.y + got.height, want.y + want.height) << where;
        ASSERT_EQ(part.width, got.width) << where;
        ASSERT_EQ(part.height, got.height) << where;
        ASSERT_LE(static_cast<int64_t>(part.pixels.size()), RegionDecodeBytes(want, w, h)) << where;
        for (int y = want.y; y < want.y + want.height; ++y) {
          const uint8_t* a = part.pixels.data() +
                             (static_cast<size_t>(y - got.y) * got.width + want.x - got.x) * 3;
          const uint8_t* b = whole.pixels.data() + (static_cast<size_t>(y) * w + want.x) * 3;
          ASSERT_EQ(std::vector<uint8_t>(a, a + want.width * 3),
                    std::vector<uint8_t>(b, b + want.width * 3))
              << where << ", row " << y;
        }
      }
    }
  }
}

// DecodeAndTransform decodes only the region; with DCT scaling off it must give the
// bytes of the whole-image decode + ApplyTransform, crop after crop.
TEST(JpegRegionDecodeTest, TransformsOverTheRegionEqualTheWholeImagePath) {
  for (const Encoded& in : Inputs()) {
    const RgbImage whole = DecodeImage(in.jpeg).value();
    for (TransformMode mode : {TransformMode::kCenter, TransformMode::kRandom}) {
      for (uint64_t seed = 0; seed < 8; ++seed) {
        TransformSpec spec;
        spec.mode = mode;
        spec.resize = 72;
        spec.crop = 64;
        spec.dct_scaling = false;
        std::vector<uint8_t> a(3 * 64 * 64), b(3 * 64 * 64);
        ASSERT_TRUE(ApplyTransform(whole, spec, seed, a.data()).ok());
        ASSERT_TRUE(DecodeAndTransform(in.jpeg, spec, seed, b.data()).ok()) << in.label;
        ASSERT_EQ(a, b) << in.label << " seed " << seed;
        if (mode == TransformMode::kCenter) break;
      }
    }
  }
}

// Records what DecodeAndTransform asks the admission for.
class RecordingAdmission : public DecodeAdmission {
 public:
  absl::Status Acquire(int64_t bytes) override {
    acquired.push_back(bytes);
    return absl::OkStatus();
  }
  void Release(int64_t) override {}
  std::vector<int64_t> acquired;
};

TEST(JpegRegionDecodeTest, AdmitsTheRegionNotTheWholeImage) {
  const int w = 1200, h = 900;
  const std::string jpeg = EncodeJpeg(PhotoLike(w, h, 3), w, h, TJSAMP_420, 85);
  TransformSpec spec;
  spec.mode = TransformMode::kRandom;
  spec.dct_scaling = false;
  RecordingAdmission admission;
  std::vector<uint8_t> out(3 * 224 * 224);
  for (uint64_t seed = 0; seed < 8; ++seed) {
    ASSERT_TRUE(DecodeAndTransform(jpeg, spec, seed, out.data(), &admission).ok());
  }
  const int64_t whole = DecodeBufferBytes(Info(jpeg), 1, 1);
  ASSERT_EQ(admission.acquired.size(), 8u);
  int64_t total = 0;
  for (int64_t bytes : admission.acquired) {
    EXPECT_LE(bytes, whole);
    total += bytes;
  }
  EXPECT_LT(total, 8 * whole * 3 / 4);  // RandomResizedCrop keeps 8-100 % of the area
}

TEST(JpegRegionDecodeTest, OnlySequentialYCbCrOrGreyEndingWithEoiGoesThroughTheRegion) {
  const int w = 120, h = 90;
  const std::string baseline = EncodeJpeg(PhotoLike(w, h, 1), w, h, TJSAMP_420, 90);
  EXPECT_TRUE(RegionDecodable(Info(baseline), baseline));
  const std::string progressive =
      EncodeJpeg(PhotoLike(w, h, 2), w, h, TJSAMP_420, 90, TJFLAG_PROGRESSIVE);
  EXPECT_FALSE(RegionDecodable(Info(progressive), progressive));
  const std::string cmyk = EncodeJpeg(PhotoLike(w, h, 3, 4), w, h, TJSAMP_420, 90, 0, TJPF_CMYK);
  EXPECT_FALSE(RegionDecodable(Info(cmyk), cmyk));
  // Truncated, or followed by other bytes: the whole-image decode judges it.
  EXPECT_FALSE(RegionDecodable(Info(baseline), baseline.substr(0, baseline.size() - 10)));
  EXPECT_FALSE(RegionDecodable(Info(baseline), baseline + "trailer"));
}

TEST(JpegRegionDecodeTest, TruncatedFileIsStillAnErrorInDecodeAndTransform) {
  const int w = 500, h = 375;
  const std::string jpeg = EncodeJpeg(PhotoLike(w, h, 4), w, h, TJSAMP_420, 90);
  TransformSpec spec;  // Resize(256) + CenterCrop(224): the bottom rows are not needed
  std::vector<uint8_t> out(3 * 224 * 224);
  const absl::Status s =
      DecodeAndTransform(jpeg.substr(0, jpeg.size() * 95 / 100), spec, 0, out.data());
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("Premature end of JPEG file"));
}

TEST(JpegRegionDecodeTest, CorruptDataInTheRegionIsAStatusNotACrash) {
  const int w = 320, h = 240;
  const std::string jpeg = EncodeJpeg(PhotoLike(w, h, 5), w, h, TJSAMP_420, 90);
  const size_t sos = jpeg.find("\xFF\xDA");
  ASSERT_NE(sos, std::string::npos);
  int errors = 0;
  for (size_t at = sos + 20; at < jpeg.size() - 2; at += 97) {
    std::string bad = jpeg;
    bad[at] = static_cast<char>(0xFF);  // a marker where entropy-coded data belongs
    bad[at + 1] = static_cast<char>(0xD3);
    RgbImage out;
    PixelRect got;
    const absl::Status s = DecodeJpegRegion(bad, {1, 1}, {0, 0, w, h}, &out, &got);
    if (!s.ok()) {
      ++errors;
      EXPECT_THAT(s.message(), HasSubstr("JPEG")) << s;
    }
  }
  EXPECT_GT(errors, 0);
  // The thread's decoder is usable again after the errors.
  RgbImage out;
  PixelRect got;
  EXPECT_TRUE(DecodeJpegRegion(jpeg, {1, 1}, {10, 10, 50, 50}, &out, &got).ok());
}

TEST(JpegRegionDecodeTest, RegionOutsideTheImageIsAnError) {
  const int w = 64, h = 48;
  const std::string jpeg = EncodeJpeg(PhotoLike(w, h, 6), w, h, TJSAMP_420, 90);
  RgbImage out;
  PixelRect got;
  EXPECT_FALSE(DecodeJpegRegion(jpeg, {1, 1}, {60, 0, 10, 10}, &out, &got).ok());
  EXPECT_FALSE(DecodeJpegRegion(jpeg, {1, 2}, {0, 0, 64, 48}, &out, &got).ok());  // 32x24
  EXPECT_TRUE(DecodeJpegRegion(jpeg, {1, 2}, {0, 0, 32, 24}, &out, &got).ok());
}

// A JPEG without quantization tables must fail however the thread's previous images
// looked: a reused libjpeg decompressor would lend it their tables.
TEST(JpegRegionDecodeTest, FileWithoutTablesFailsWhateverTheThreadDecodedBefore) {
  const int w = 48, h = 40;
  const std::string good = EncodeJpeg(PhotoLike(w, h, 8), w, h, TJSAMP_420, 90);
  std::string no_dqt = good;
  for (size_t at; (at = no_dqt.find("\xFF\xDB")) != std::string::npos;) {
    const size_t length =
        (static_cast<uint8_t>(no_dqt[at + 2]) << 8) | static_cast<uint8_t>(no_dqt[at + 3]);
    no_dqt.erase(at, 2 + length);
  }
  ASSERT_LT(no_dqt.size(), good.size());
  TransformSpec spec;
  spec.resize = 32;
  spec.crop = 32;
  spec.dct_scaling = false;
  std::vector<uint8_t> out(3 * 32 * 32);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(DecodeImage(good).ok());
    ASSERT_TRUE(DecodeAndTransform(good, spec, 0, out.data()).ok());
    EXPECT_FALSE(DecodeImage(no_dqt).ok());
    const absl::Status s = DecodeAndTransform(no_dqt, spec, 0, out.data());
    EXPECT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr("Quantization table"));
  }
}

}  // namespace
}  // namespace shardcast::internal
