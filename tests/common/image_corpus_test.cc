// The image corpus written by libjpeg, libpng and libwebp (tests/support/image_corpus.h)
// decodes as PIL decodes it, byte for byte: every JPEG sampling factor libjpeg accepts
// (TurboJPEG's header call names only six), every PNG bit depth and colour type (16-bit
// grey as PIL's mode "I" clipped at 255), WebP; the header says what the decode will
// allocate whatever segments precede the frame; the region decode, DCT scaling and the
// lossless cut take every sampling or refuse it with a Status.
#include "tests/support/image_corpus.h"

#include <png.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/image/image_decode_internal.h"
#include "common/image/image_transform.h"
#include "common/image/jpeg_lossless_cut.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/image_test_util.h"

namespace shardcast {
namespace {

using image_corpus::CorpusFile;
using image_corpus::JpegOptions;
using image_corpus::MakeCorpus;
using image_corpus::Sampling;

struct PilImage {
  int width = 0;
  int height = 0;
  std::string mode;
  std::vector<uint8_t> rgb;
};

// PIL's Image.open().convert("RGB") of every file, in one Python process.
std::map<std::string, PilImage> PilDecodeAll(const std::vector<CorpusFile>& files) {
  testing_util::TempDir dir;
  for (const CorpusFile& f : files) {
    testing_util::WriteFile(dir.path() + "/" + f.name, f.bytes.data(), f.bytes.size());
  }
  std::string log;
  const int rc = testing_util::RunCommand(std::string(REFERENCE_PYTHON) + " " +
                                              testing_util::ReferenceScript("pil_decode_all.py") +
                                              " " + dir.path(),
                                          &log);
  EXPECT_EQ(rc, 0) << log;
  std::map<std::string, PilImage> out;
  std::istringstream lines(log);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string name;
    PilImage image;
    if (!(fields >> name >> image.width >> image.height >> image.mode)) continue;
    const std::string raw = testing_util::ReadWholeFile(dir.path() + "/" + name + ".rgb");
    image.rgb.assign(raw.begin(), raw.end());
    out[name] = image;
  }
  return out;
}

double MeanAbsDiff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size() || a.empty()) return 1e9;
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += std::abs(int{a[i]} - int{b[i]});
  return sum / static_cast<double>(a.size());
}

TEST(ImageCorpusTest, EveryFileDecodesAsPilConvertRgbByteForByte) {
  if (!testing_util::PythonHas("PIL")) GTEST_SKIP() << REFERENCE_PYTHON << " has no PIL";
  const std::vector<CorpusFile> files = MakeCorpus(/*small=*/false);
  ASSERT_GT(files.size(), 60u);
  const std::map<std::string, PilImage> pil = PilDecodeAll(files);
  for (const CorpusFile& f : files) {
    SCOPED_TRACE(f.name);
    ASSERT_EQ(pil.count(f.name), 1u) << "PIL could not open it";
    const PilImage& want = pil.at(f.name);
    absl::StatusOr<RgbImage> got = DecodeImage(f.bytes);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->width, want.width);
    ASSERT_EQ(got->height, want.height);
    // Same libjpeg (ISLOW IDCT, fancy upsampling), libpng and libwebp as PIL's: equal.
    EXPECT_EQ(got->pixels, want.rgb)
        << "PIL mode " << want.mode << ", mean diff " << MeanAbsDiff(got->pixels, want.rgb);
    absl::StatusOr<ImageInfo> info = ReadImageInfo(f.bytes);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->width, want.width);
    EXPECT_EQ(info->height, want.height);
    if (info->format == ImageFormat::kJpeg) {
      EXPECT_EQ(info->progressive, f.name.find("progressive") != std::string::npos);
      EXPECT_EQ(info->components, f.name.find("grey") != std::string::npos ? 1 : 3);
      EXPECT_EQ(info->multi_scan, f.name.find("scan-per-component") != std::string::npos);
    }
  }
}

// A JPEG made by libjpeg with `sampling` (photo-like pixels), w x h.
std::string LibjpegFile(int w, int h, std::vector<Sampling> sampling, bool progressive = false) {
  JpegOptions options;
  options.sampling = std::move(sampling);
  options.progressive = progressive;
  std::string error;
  std::string jpeg = image_corpus::EncodeJpegWithLibjpeg(image_corpus::PhotoLikePixels(w, h, 3, 9),
                                                         w, h, options, &error);
  EXPECT_FALSE(jpeg.empty()) << error;
  return jpeg;
}

TEST(ImageCorpusTest, SegmentsBeforeTheFrameDoNotHideAProgressiveFrame) {
  const int w = 301, h = 203;
  const std::string progressive = LibjpegFile(w, h, {{2, 2}, {1, 1}, {1, 1}}, true);
  // Each as libjpeg reads it: a zero-length APP0 (its length alone), an APP15 of length
  // 1, fill bytes before a marker, an empty COM.
  const std::string variants[] = {
      image_corpus::WithZeroLengthApp0(progressive),
      progressive.substr(0, 2) + std::string("\xFF\xEF\x00\x01", 4) + progressive.substr(2),
      progressive.substr(0, 2) + std::string("\xFF\xFF\xFF\xFE\x00\x02", 6) + progressive.substr(2),
  };
  const ImageInfo plain = ReadImageInfo(progressive).value();
  ASSERT_TRUE(plain.progressive);
  const int64_t coefficients = int64_t{3} * 304 * 208 * 2;  // 3 components, 16-padded, 2 bytes
  EXPECT_EQ(DecodeBufferBytes(plain, 1, 1), int64_t{w} * h * 3 + coefficients);
  const RgbImage want = DecodeImage(progressive).value();
  for (const std::string& jpeg : variants) {
    absl::StatusOr<ImageInfo> info = ReadImageInfo(jpeg);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_TRUE(info->progressive);
    EXPECT_EQ(info->components, 3);
    EXPECT_EQ(DecodeBufferBytes(*info, 1, 1), DecodeBufferBytes(plain, 1, 1));
    absl::StatusOr<RgbImage> got = DecodeImage(jpeg);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->pixels, want.pixels);
  }
}

// Decode memory admission counts what libjpeg really allocates for the coefficients it
// keeps (progressive and multi-scan files, every sampling up to 4x4), at every DCT scale:
// before, a scan per component went uncounted, and factors of 3 and 4 were padded to 16
// pixels where libjpeg pads to 24 and 32.
TEST(ImageCorpusTest, DecodeMemoryCountsEveryCoefficientLibjpegKeeps) {
  int buffered = 0;
  for (const CorpusFile& f : MakeCorpus(/*small=*/false)) {
    if (f.name.rfind("jpeg-", 0) != 0) continue;
    SCOPED_TRACE(f.name);
    const int64_t coefficients = image_corpus::LibjpegCoefficientBufferBytes(f.bytes);
    ASSERT_GE(coefficients, 0);
    const ImageInfo info = ReadImageInfo(f.bytes).value();
    EXPECT_EQ(coefficients > 0, info.progressive || info.multi_scan);
    buffered += coefficients > 0;
    for (int denom : {1, 2, 4, 8}) {
      const internal::ScalingFactor s{1, denom};
      const int64_t pixels =
          int64_t{internal::ScaledSize(info.width, s)} * internal::ScaledSize(info.height, s) * 3;
      EXPECT_GE(DecodeBufferBytes(info, 1, denom) - pixels, coefficients) << "1/" << denom;
    }
  }
  EXPECT_GE(buffered, 15);
}

// Samplings TurboJPEG has no TJSAMP for, sequential and progressive.
std::vector<std::pair<std::string, std::string>> OddSamplingFiles() {
  const std::vector<std::vector<Sampling>> odd = {
      {{1, 4}, {1, 1}, {1, 1}}, {{3, 1}, {1, 1}, {1, 1}}, {{1, 1}, {2, 2}, {2, 2}},
      {{2, 2}, {1, 1}, {2, 2}}, {{4, 2}, {1, 1}, {1, 1}}, {{2, 2}, {2, 1}, {1, 1}}};
  std::vector<std::pair<std::string, std::string>> files;
  int i = 0;
  for (const auto& s : odd) {
    for (bool progressive : {false, true}) {
      const int w = 203 + 7 * i, h = 157 + 5 * i;
      ++i;
      files.emplace_back(
          absl::StrFormat("%dx%d,%dx%d,%dx%d%s %dx%d", s[0].h, s[0].v, s[1].h, s[1].v, s[2].h,
                          s[2].v, progressive ? " progressive" : "", w, h),
          LibjpegFile(w, h, s, progressive));
    }
  }
  return files;
}

TEST(ImageCorpusTest, EverySamplingDecodesAtEveryDctScaleAndThroughTheRegion) {
  for (const auto& [name, jpeg] : OddSamplingFiles()) {
    SCOPED_TRACE(name);
    const ImageInfo info = ReadImageInfo(jpeg).value();
    for (const internal::ScalingFactor f :
         {internal::ScalingFactor{1, 2}, internal::ScalingFactor{1, 4},
          internal::ScalingFactor{1, 8}}) {
      RgbImage scaled;
      ASSERT_TRUE(internal::DecodeInto(jpeg, f, &scaled).ok()) << f.denom;
      EXPECT_EQ(scaled.width, internal::ScaledSize(info.width, f));
      EXPECT_EQ(scaled.height, internal::ScaledSize(info.height, f));
    }
    // DecodeAndTransform takes the region decode (sequential files) or the whole one; with
    // DCT scaling off it must equal the whole-image decode + transform, crop after crop.
    const RgbImage whole = DecodeImage(jpeg).value();
    for (TransformMode mode : {TransformMode::kCenter, TransformMode::kRandom}) {
      for (uint64_t seed = 0; seed < 6; ++seed) {
        TransformSpec spec;
        spec.mode = mode;
        spec.resize = 72;
        spec.crop = 64;
        spec.dct_scaling = false;
        std::vector<uint8_t> a(3 * 64 * 64), b(3 * 64 * 64);
        ASSERT_TRUE(ApplyTransform(whole, spec, seed, a.data()).ok());
        ASSERT_TRUE(DecodeAndTransform(jpeg, spec, seed, b.data()).ok());
        ASSERT_EQ(a, b) << "seed " << seed;
      }
    }
  }
}

// Encoded delivery with --lossless-cut: the cut takes a sampling TurboJPEG names, and
// refuses the others with a Status (jpeg_lossless_cut.h), after which the server sends
// the stored bytes; either way the client's decode is the server's bytes.
TEST(ImageCorpusTest, TheLosslessCutOfEverySamplingDecodesToTheServersBytesOrIsRefused) {
  for (const auto& [name, jpeg] : OddSamplingFiles()) {
    SCOPED_TRACE(name);
    TransformSpec spec;
    spec.mode = TransformMode::kRandom;
    spec.resize = 72;
    spec.crop = 48;
    spec.dct_scaling = false;
    for (uint64_t seed = 0; seed < 4; ++seed) {
      absl::StatusOr<EncodedPlan> plan = PlanEncodedSample(jpeg, spec, seed);
      ASSERT_TRUE(plan.ok()) << plan.status();
      std::vector<uint8_t> server(3 * 48 * 48), client(3 * 48 * 48);
      ASSERT_TRUE(DecodeAndTransform(jpeg, spec, seed, server.data()).ok());
      ASSERT_TRUE(DecodeWithCrop(jpeg, plan->crop, false, client.data()).ok());
      EXPECT_EQ(client, server) << "stored bytes, seed " << seed;
      absl::StatusOr<SourceRect> needed = SourcePixelsRead(plan->info, plan->crop, false);
      ASSERT_TRUE(needed.ok()) << needed.status();
      absl::StatusOr<LosslessCut> cut = CutJpegLosslessly(jpeg, plan->info, *needed);
      if (!cut.ok()) {
        EXPECT_TRUE(absl::IsInvalidArgument(cut.status()) ||
                    absl::IsFailedPrecondition(cut.status()))
            << cut.status();
        if (absl::IsInvalidArgument(cut.status())) {
          EXPECT_THAT(cut.status().message(),
                      ::testing::HasSubstr("a sampling TurboJPEG does not name is not cut"));
        }
        continue;
      }
      std::vector<uint8_t> from_cut(3 * 48 * 48);
      ASSERT_TRUE(
          DecodeWithCrop(cut->bytes, plan->crop, false, from_cut.data(), nullptr, &cut->window)
              .ok());
      EXPECT_EQ(from_cut, server) << "cut, seed " << seed;
    }
  }
}

}  // namespace
}  // namespace shardcast
