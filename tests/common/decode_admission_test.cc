// Decode memory is decided from the header: DecodeBufferBytes for each kind of image,
// and DecodeAndTransform asking a DecodeAdmission for exactly that before it allocates,
// giving it back afterwards, and failing without decoding when admission is refused.
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/image/image_transform.h"
#include "gtest/gtest.h"
#include "tests/common/image_test_util.h"

namespace shardcast {
namespace {

using testing_util::EncodeJpeg;
using testing_util::EncodePng;
using testing_util::PhotoLike;

// A DecodeAdmission that records what it is asked and refuses above `limit`.
class RecordingAdmission : public DecodeAdmission {
 public:
  explicit RecordingAdmission(int64_t limit) : limit_(limit) {}
  absl::Status Acquire(int64_t bytes) override {
    acquired.push_back(bytes);
    if (bytes > limit_) return absl::ResourceExhaustedError("over the test budget");
    held += bytes;
    return absl::OkStatus();
  }
  void Release(int64_t bytes) override { held -= bytes; }

  std::vector<int64_t> acquired;
  int64_t held = 0;

 private:
  const int64_t limit_;
};

TEST(DecodeBufferBytesTest, FromTheHeaderForEachKindOfImage) {
  const int w = 640, h = 480;
  const std::vector<uint8_t> px = PhotoLike(w, h, 3);
  absl::StatusOr<ImageInfo> baseline = ReadImageInfo(EncodeJpeg(px, w, h, TJSAMP_420));
  ASSERT_TRUE(baseline.ok()) << baseline.status();
  EXPECT_FALSE(baseline->progressive);
  EXPECT_EQ(DecodeBufferBytes(*baseline, 1, 1), int64_t{w} * h * 3);
  EXPECT_EQ(DecodeBufferBytes(*baseline, 1, 2), int64_t{w / 2} * (h / 2) * 3);

  absl::StatusOr<ImageInfo> progressive =
      ReadImageInfo(EncodeJpeg(px, w, h, TJSAMP_420, 90, TJFLAG_PROGRESSIVE));
  ASSERT_TRUE(progressive.ok()) << progressive.status();
  EXPECT_TRUE(progressive->progressive);
  EXPECT_EQ(progressive->components, 3);
  // The coefficients stay at full size whatever the DCT scale.
  EXPECT_EQ(DecodeBufferBytes(*progressive, 1, 2),
            int64_t{w / 2} * (h / 2) * 3 + 3 * 640 * 480 * 2);

  std::vector<uint8_t> cmyk_px(static_cast<size_t>(w) * h * 4, 100);
  absl::StatusOr<ImageInfo> cmyk =
      ReadImageInfo(EncodeJpeg(cmyk_px, w, h, TJSAMP_444, 90, 0, TJPF_CMYK));
  ASSERT_TRUE(cmyk.ok()) << cmyk.status();
  EXPECT_TRUE(cmyk->cmyk);
  EXPECT_EQ(DecodeBufferBytes(*cmyk, 1, 1), int64_t{w} * h * 4);

  absl::StatusOr<ImageInfo> png =
      ReadImageInfo(EncodePng(PhotoLike(w, h, 4), w, h, PNG_COLOR_TYPE_RGB, 8));
  ASSERT_TRUE(png.ok()) << png.status();
  EXPECT_EQ(DecodeBufferBytes(*png, 1, 8), int64_t{w} * h * 3 + int64_t{h} * 8);
}

TEST(DecodeAdmissionTest, AsksForTheHeaderFigureAndGivesItBack) {
  const int w = 1024, h = 768;
  const std::string jpeg = EncodeJpeg(PhotoLike(w, h, 5), w, h, TJSAMP_420);
  TransformSpec spec;  // Resize(256) + CenterCrop(224): DCT scale 1/2 keeps >= 256
  spec.dct_scaling = true;
  std::vector<uint8_t> out(3 * 224 * 224);
  RecordingAdmission admission(int64_t{1} << 30);
  ASSERT_TRUE(DecodeAndTransform(jpeg, spec, 0, out.data(), &admission).ok());
  ASSERT_EQ(admission.acquired.size(), 1u);
  // A sequential JPEG is decoded only in the rectangle the crop reads (at 1/2: the
  // 224 outputs cover 224 * 1.5 = 336 pixels each way), and that is what is asked for:
  // less than the whole 512x384 image at 1/2.
  EXPECT_LT(admission.acquired[0], int64_t{512} * 384 * 3);
  EXPECT_GE(admission.acquired[0], int64_t{336} * 336 * 3);
  EXPECT_EQ(admission.held, 0);

  // Same pixels as without an admission.
  std::vector<uint8_t> plain(out.size());
  ASSERT_TRUE(DecodeAndTransform(jpeg, spec, 0, plain.data()).ok());
  EXPECT_EQ(out, plain);
}

TEST(DecodeAdmissionTest, RefusalFailsTheDecodeBeforeAnyPixelIsWritten) {
  const int w = 800, h = 600;
  const std::string png = EncodePng(PhotoLike(w, h, 6), w, h, PNG_COLOR_TYPE_RGB, 8);
  TransformSpec spec;
  std::vector<uint8_t> out(3 * 224 * 224, 7);
  RecordingAdmission admission(1000);
  const absl::Status status = DecodeAndTransform(png, spec, 0, out.data(), &admission);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_EQ(admission.held, 0);
  EXPECT_EQ(out, std::vector<uint8_t>(out.size(), 7));
}

TEST(DecodeAdmissionTest, AFailedDecodeGivesItsBytesBack) {
  const int w = 320, h = 240;
  std::string jpeg = EncodeJpeg(PhotoLike(w, h, 8), w, h, TJSAMP_420);
  jpeg.resize(jpeg.size() / 2);  // truncated: the header reads, the decode fails
  TransformSpec spec;
  spec.resize = 64;
  spec.crop = 56;
  std::vector<uint8_t> out(3 * 56 * 56);
  RecordingAdmission admission(int64_t{1} << 30);
  EXPECT_FALSE(DecodeAndTransform(jpeg, spec, 0, out.data(), &admission).ok());
  EXPECT_EQ(admission.acquired.size(), 1u);
  EXPECT_EQ(admission.held, 0);
}

}  // namespace
}  // namespace shardcast
