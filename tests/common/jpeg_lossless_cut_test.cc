// The lossless cut's contract: the client's decode of the cut makes the bytes the
// server's decode of the stored JPEG makes, for every crop the transform plans (and the
// crops that touch each border), every subsampling TurboJPEG names, progressive and
// CMYK files, sizes off the MCU grid, DCT scaling on and off; and what it cannot cut
// is an error, not a wrong image.
#include "common/image/jpeg_lossless_cut.h"

#include <cstdint>
#include <string>
#include <utility>
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
using testing_util::PhotoLike;

struct Case {
  std::string name;
  std::string bytes;
};

std::vector<Case> Jpegs() {
  std::vector<Case> cases;
  // Off the MCU grid (odd sizes, not multiples of 8, 16 or 32) and on it; portrait,
  // landscape and big enough for 1/4 and 1/8 DCT scales of a 32-pixel output.
  const int sizes[][2] = {{333, 251}, {203, 517}, {640, 480}};
  uint32_t seed = 1;
  for (const auto& size : sizes) {
    const int w = size[0], h = size[1];
    const std::vector<uint8_t> px = PhotoLike(w, h, seed++);
    for (int subsamp : {TJSAMP_444, TJSAMP_422, TJSAMP_420, TJSAMP_440, TJSAMP_411}) {
      cases.push_back(
          {absl::StrFormat("jpeg%dx%d_s%d", w, h, subsamp), EncodeJpeg(px, w, h, subsamp, 88)});
    }
    cases.push_back({absl::StrFormat("progressive%dx%d", w, h),
                     EncodeJpeg(px, w, h, TJSAMP_420, 85, TJFLAG_PROGRESSIVE)});
    cases.push_back({absl::StrFormat("gray%dx%d", w, h),
                     EncodeJpeg(PhotoLike(w, h, seed, 1), w, h, TJSAMP_GRAY, 90, 0, TJPF_GRAY)});
    for (int subsamp : {TJSAMP_444, TJSAMP_420}) {  // TurboJPEG writes CMYK pixels as YCCK
      cases.push_back({absl::StrFormat("cmyk%dx%d_s%d", w, h, subsamp),
                       EncodeJpeg(PhotoLike(w, h, seed, 4), w, h, subsamp, 90, 0, TJPF_CMYK)});
    }
  }
  return cases;
}

// Cuts `c` for `crop` and checks that the cut's decode makes `expected`. Returns the
// cut's size (0 when the window is the whole image: nothing to cut).
size_t ExpectCutDecodesTo(const Case& c, const SampleCrop& crop, bool dct,
                          const std::vector<uint8_t>& expected) {
  SCOPED_TRACE(absl::StrFormat("%s crop %dx%d at (%d, %d) of %dx%d, output %d, flip %d, dct %d",
                               c.name, crop.width, crop.height, crop.left, crop.top,
                               crop.source_width, crop.source_height, crop.output, crop.flip, dct));
  absl::StatusOr<ImageInfo> info = ReadImageInfo(c.bytes);
  EXPECT_TRUE(info.ok()) << info.status();
  if (!info.ok()) return 0;
  absl::StatusOr<SourceRect> needed = SourcePixelsRead(*info, crop, dct);
  EXPECT_TRUE(needed.ok()) << needed.status();
  if (!needed.ok()) return 0;
  absl::StatusOr<LosslessCut> cut = CutJpegLosslessly(c.bytes, *info, *needed);
  if (!cut.ok()) {
    EXPECT_EQ(cut.status().code(), absl::StatusCode::kFailedPrecondition) << cut.status();
    return 0;
  }
  const SourceWindow& w = cut->window;
  EXPECT_LE(w.left, needed->left);
  EXPECT_LE(w.top, needed->top);
  EXPECT_GE(w.left + w.width, needed->left + needed->width);
  EXPECT_GE(w.top + w.height, needed->top + needed->height);
  std::vector<uint8_t> from_cut(expected.size(), 2);
  const absl::Status decoded = DecodeWithCrop(cut->bytes, crop, dct, from_cut.data(), nullptr, &w);
  EXPECT_TRUE(decoded.ok()) << decoded;
  EXPECT_TRUE(expected == from_cut) << "the cut " << w.width << "x" << w.height << " at (" << w.left
                                    << ", " << w.top << ") decodes to other bytes";
  return cut->bytes.size();
}

TEST(JpegLosslessCutTest, TheCutOfEveryPlannedCropDecodesToTheServersBytes) {
  int cuts = 0;
  for (const Case& c : Jpegs()) {
    for (TransformMode mode : {TransformMode::kRandom, TransformMode::kCenter}) {
      for (bool dct : {false, true}) {
        for (uint64_t seed = 0; seed < 25; ++seed) {
          TransformSpec spec;
          spec.mode = mode;
          spec.resize = 40;
          spec.crop = 32;
          spec.dct_scaling = dct;
          absl::StatusOr<EncodedPlan> plan = PlanEncodedSample(c.bytes, spec, seed);
          ASSERT_TRUE(plan.ok()) << c.name << ": " << plan.status();
          std::vector<uint8_t> server(3 * 32 * 32);
          ASSERT_TRUE(DecodeAndTransform(c.bytes, spec, seed, server.data()).ok());
          if (ExpectCutDecodesTo(c, plan->crop, dct, server) > 0) ++cuts;
          if (mode == TransformMode::kCenter) break;  // the seed changes nothing
        }
      }
    }
  }
  EXPECT_GT(cuts, 700) << "most random crops leave something to cut";
}

TEST(JpegLosslessCutTest, CropsTouchingEachBorderAndCorner) {
  for (const Case& c : Jpegs()) {
    absl::StatusOr<ImageInfo> info = ReadImageInfo(c.bytes);
    ASSERT_TRUE(info.ok());
    const int w = info->width, h = info->height;
    const int cw = w / 3, ch = h / 3;
    // (left, top) of a cw x ch window: each corner, the middle of each border.
    const int places[][2] = {{0, 0},
                             {w - cw, 0},
                             {0, h - ch},
                             {w - cw, h - ch},
                             {(w - cw) / 2, 0},
                             {(w - cw) / 2, h - ch},
                             {0, (h - ch) / 2},
                             {w - cw, (h - ch) / 2},
                             {1, 1}};
    for (const auto& place : places) {
      // A small output lets the DCT scale a third of the image down, a big one not.
      for (const auto& [output, dct] : {std::pair{16, true}, std::pair{64, false}}) {
        SampleCrop crop;
        crop.mode = TransformMode::kRandom;
        crop.source_width = w;
        crop.source_height = h;
        crop.left = place[0];
        crop.top = place[1];
        crop.width = cw;
        crop.height = ch;
        crop.flip = output == 16;
        crop.output = output;
        // The client's decode of the whole stored image: DecodeAndTransform's bytes
        // (encoded_crop_test.cc), for a crop no seed may draw.
        std::vector<uint8_t> whole(3 * output * output);
        ASSERT_TRUE(DecodeWithCrop(c.bytes, crop, dct, whole.data()).ok());
        EXPECT_GT(ExpectCutDecodesTo(c, crop, dct, whole), 0u);
      }
    }
  }
}

TEST(JpegLosslessCutTest, ASmallCropCutsMostOfTheImageAway) {
  const std::vector<uint8_t> px = PhotoLike(1024, 768, 4);
  const Case c{"photo", EncodeJpeg(px, 1024, 768, TJSAMP_420, 90)};
  SampleCrop crop;
  crop.mode = TransformMode::kRandom;
  crop.source_width = 1024;
  crop.source_height = 768;
  crop.left = 500;
  crop.top = 300;
  crop.width = crop.height = 200;
  crop.output = 64;
  std::vector<uint8_t> whole(3 * 64 * 64);
  ASSERT_TRUE(DecodeWithCrop(c.bytes, crop, /*dct_scaling=*/true, whole.data()).ok());
  const size_t cut = ExpectCutDecodesTo(c, crop, /*dct=*/true, whole);
  EXPECT_GT(cut, 0u);
  EXPECT_LT(cut, c.bytes.size() / 4);
}

TEST(JpegLosslessCutTest, WhatCannotBeCutIsAnError) {
  const std::vector<uint8_t> px = PhotoLike(320, 240, 6);
  const std::string jpeg = EncodeJpeg(px, 320, 240, TJSAMP_420);
  absl::StatusOr<ImageInfo> info = ReadImageInfo(jpeg);
  ASSERT_TRUE(info.ok());

  // The whole image: nothing to cut.
  EXPECT_EQ(CutJpegLosslessly(jpeg, *info, SourceRect{10, 10, 300, 220}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // A rectangle outside the image.
  EXPECT_THAT(CutJpegLosslessly(jpeg, *info, SourceRect{300, 0, 40, 10}).status().message(),
              HasSubstr("not inside"));
  EXPECT_FALSE(CutJpegLosslessly(jpeg, *info, SourceRect{0, 0, 0, 10}).ok());
  // Not a JPEG.
  const std::string png = EncodePng(px, 320, 240, PNG_COLOR_TYPE_RGB, 8);
  absl::StatusOr<ImageInfo> png_info = ReadImageInfo(png);
  ASSERT_TRUE(png_info.ok());
  EXPECT_THAT(CutJpegLosslessly(png, *png_info, SourceRect{0, 0, 16, 16}).status().message(),
              HasSubstr("only a JPEG"));
  // An `info` that is not this file's.
  ImageInfo wrong = *info;
  wrong.width = 640;
  EXPECT_THAT(CutJpegLosslessly(jpeg, wrong, SourceRect{0, 0, 16, 16}).status().message(),
              HasSubstr("320x240"));
  // Truncated: the decoder would refuse it ("Premature end"), so does the cut.
  const std::string truncated = jpeg.substr(0, jpeg.size() * 2 / 3);
  absl::StatusOr<LosslessCut> cut = CutJpegLosslessly(truncated, *info, SourceRect{0, 0, 16, 16});
  EXPECT_EQ(cut.status().code(), absl::StatusCode::kInvalidArgument) << cut.status();
  // Corrupt entropy-coded data in the middle.
  std::string corrupt = jpeg;
  corrupt[corrupt.size() / 2] = '\xff';  // a restart marker where none may be
  corrupt[corrupt.size() / 2 + 1] = '\xd3';
  ASSERT_FALSE(DecodeImage(corrupt).ok());
  EXPECT_EQ(CutJpegLosslessly(corrupt, *info, SourceRect{0, 0, 16, 16}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(JpegLosslessCutTest, AProgressiveFileThatStopsEarlyIsNotCut) {
  const std::vector<uint8_t> px = PhotoLike(320, 240, 8);
  const std::string progressive = EncodeJpeg(px, 320, 240, TJSAMP_420, 90, TJFLAG_PROGRESSIVE);
  // Without its last scan (a refinement to full precision): a valid file, which libjpeg
  // decodes with block smoothing where the coefficients are not all known.
  std::string early = progressive.substr(0, progressive.rfind("\xff\xda"));
  early += "\xff\xd9";
  ASSERT_TRUE(DecodeImage(early).ok());
  absl::StatusOr<ImageInfo> info = ReadImageInfo(early);
  ASSERT_TRUE(info.ok());
  ASSERT_TRUE(info->progressive);
  EXPECT_EQ(CutJpegLosslessly(early, *info, SourceRect{100, 100, 50, 50}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(CutJpegLosslessly(progressive, *info, SourceRect{100, 100, 50, 50}).ok());

  // A zero-length APP0 first (found by image_transform_fuzzer): libjpeg reads on after
  // it, ReadImageInfo's marker scan stops there and says "not progressive"; the cut's
  // own check of the scans must not trust that.
  ASSERT_EQ(early.substr(0, 6), std::string("\xff\xd8\xff\xe0\x00\x10", 6));  // JFIF APP0
  const std::string hidden = std::string("\xff\xd8\xff\xe0\x00\x00", 6) + early.substr(2 + 18);
  ASSERT_TRUE(DecodeImage(hidden).ok()) << DecodeImage(hidden).status();
  absl::StatusOr<ImageInfo> hidden_info = ReadImageInfo(hidden);
  ASSERT_TRUE(hidden_info.ok());
  EXPECT_EQ(CutJpegLosslessly(hidden, *hidden_info, SourceRect{100, 100, 50, 50}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(JpegLosslessCutTest, CoefficientsBeyondEightBitsAreNotCut) {
  // A hostile greyscale baseline JPEG (93x55; image_transform_fuzzer's seed
  // 4623aa4ce5c7e6b8154d4b1480e0a0c162d2f33c without its first byte): its Huffman codes
  // make AC coefficients of more than 10 bits, which the decoder takes and TurboJPEG's
  // encoder would write with codes the standard tables lack: the cut decoded to other
  // pixels, silently.
  const std::string hostile(
      "\xff\xd8\xff\xff\xdb\x00\x43\x00\x06\x04\x05\x06\x05\x04\x06\x06\x05\x06\x47\x07\x06\x08\x0a"
      "\x10"
      "\x0a\x0a\x09\x09\x0a\x14\x0e\x0f\x14\x0c\x17\x14\x18\x18\x17\x14\x16\x16\x1a\x15\xff\xff\xff"
      "\x0f"
      "\x23\xe7\x16\x17\x20\x2c\x20\x23\x26\x27\xf0\x5b\x0a\x49\x65\x4e\xee\xee\x28\x30\x25\x28\x29"
      "\x28"
      "\xff\xc0\x00\x0b\x08\x00\x37\x00\x5d\x01\x01\x11\x00\xff\xc4\x00\xb5\x10\x00\x02\x01\x03\x03"
      "\x02"
      "\x04\x03\x05\x05\x04\x04\x00\x00\x01\x7d\x00\x01\x02\x6d\x04\xb5\x10\x00\x02\x01\x03\x03\x02"
      "\x04"
      "\x03\x05\x05\x04\x04\x00\x00\x01\x7d\x01\xb5\x10\x10\x02\x01\x03\x03\x02\xfc\x03\x05\x05\x04"
      "\x04"
      "\x00\x00\x01\x7d\x01\x02\x03\x00\x04\x23\x00\x00\x27\x31\x41\x06\x13\x51\x61\x07\x22\x71\x14"
      "\x33"
      "\x81\x91\xa1\x08\x23\x42\xb1\xc1\x15\x52\xd1\xf0\x24\x31\x62\x72\x82\x09\x0a\x16\x17\x18\x19"
      "\x1a"
      "\x25\x26\x27\x28\x29\x2a\x00\x00\x00\x00\x00\x00\x00\x2d\x44\x05\x69\x6a\x73\x01\x00\xb1\x15"
      "\xd1"
      "\x52\x06\xff\xd8\xff\x62\x72\x82\x09\x0a\x16\x17\x18\x19\x2a\x25\x26\x27\x28\x29\x2a\x00\x00"
      "\x00"
      "\x00\x00\x00\x00\x6d\x44\x45\xb5\xb6\xb7\xb8\xb9\xba\xc2\x83\xc4\xc5\xc6\xc7\xc8\xc9\xca\xf5"
      "\xf6"
      "\xf6\xf8\xf9\xfa\xff\xda\x00\x08\x01\x01\x00\x00\x3f\x00\xf0\x5b\x0a\x49\x4e\xee\xee\x01\x00"
      "\x02"
      "\x25\x25\x25\x01\x00\x67\x40\x00\x01\xac\x46\x25\x06\x89\x50\x4e\x47\x0d\x0a\x1a\xee\xee\xee"
      "\xee"
      "\xee\xee\x01\x00\x00\x02\xee\x00\x00\x00\x00\x00\x2a\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x00"
      "\x00\x00\x00\x00\x00\x00\xee\xee\xee\xee\xee\xee\x30\x0e\x00\x00\x00\x8c\x7e\xff\xd9\x18"
      "\x00",
      359);
  absl::StatusOr<ImageInfo> info = ReadImageInfo(hostile);
  ASSERT_TRUE(info.ok()) << info.status();
  std::vector<uint8_t> server(3 * 13 * 13);
  TransformSpec spec;
  spec.mode = TransformMode::kRandom;
  spec.crop = 13;
  ASSERT_TRUE(DecodeAndTransform(hostile, spec, 0xb9, server.data()).ok());
  absl::StatusOr<LosslessCut> cut = CutJpegLosslessly(hostile, *info, SourceRect{0, 0, 40, 30});
  EXPECT_THAT(cut.status().message(), HasSubstr("beyond what 8-bit samples make"));
}

TEST(JpegLosslessCutTest, TheCutsMemoryBoundHoldsTheCoefficients) {
  ImageInfo info;
  info.format = ImageFormat::kJpeg;
  info.width = 500;
  info.height = 375;
  info.components = 3;
  // 63 x 47 blocks of 64 coefficients of 2 bytes, for 3 components at full resolution.
  EXPECT_GE(LosslessCutBytes(info), int64_t{63} * 47 * 64 * 2 * 3);
  EXPECT_LT(LosslessCutBytes(info), int64_t{2} << 20);
}

}  // namespace
}  // namespace shardcast
