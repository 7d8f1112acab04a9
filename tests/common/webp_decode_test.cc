// WebP through the serve path's entry points (DecodeImage, ReadImageInfo,
// DecodeAndTransform) on files made by libwebp's encoder: lossless exact, lossy and
// alpha as PIL decodes them, headers over the pixel limit or the decode budget refused
// before any pixel buffer, the decode bytes counted at least what a decode touches (a
// stream naming 65,536 entropy groups included), animations refused, truncated and
// corrupt files errors.
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/image/image_decode_internal.h"
#include "common/image/image_transform.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/image_test_util.h"
#include "tests/support/hostile_webp.h"

namespace shardcast {
namespace {

using ::testing::HasSubstr;
using testing_util::EncodeWebp;
using testing_util::PhotoLike;
using testing_util::PilDecode;

// The RGB of interleaved RGBA pixels.
std::vector<uint8_t> DropAlpha(const std::vector<uint8_t>& rgba) {
  std::vector<uint8_t> rgb;
  rgb.reserve(rgba.size() / 4 * 3);
  for (size_t i = 0; i < rgba.size(); i += 4) rgb.insert(rgb.end(), &rgba[i], &rgba[i + 3]);
  return rgb;
}

double MeanAbsDiff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  EXPECT_EQ(a.size(), b.size());
  double sum = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) sum += std::abs(int{a[i]} - int{b[i]});
  return a.empty() ? 0 : sum / a.size();
}

void AppendLe(std::string* s, uint32_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

std::string Chunk(const std::string& fourcc, const std::string& payload) {
  std::string c = fourcc;
  AppendLe(&c, static_cast<uint32_t>(payload.size()), 4);
  c += payload;
  if (payload.size() % 2 == 1) c.push_back('\0');
  return c;
}

std::string Riff(const std::string& chunks) {
  std::string s = "RIFF";
  AppendLe(&s, static_cast<uint32_t>(4 + chunks.size()), 4);
  return s + "WEBP" + chunks;
}

// A lossless (VP8L) header claiming w x h: signature 0x2f, then 14 bits width - 1,
// 14 bits height - 1, the alpha bit and a 3-bit version 0, followed by `tail`.
std::string LosslessHeader(int w, int h, const std::string& tail = std::string(64, '\0')) {
  std::string payload(1, '\x2f');
  AppendLe(&payload, static_cast<uint32_t>(w - 1) | (static_cast<uint32_t>(h - 1) << 14), 4);
  return Riff(Chunk("VP8L", payload + tail));
}

TEST(WebpDecodeTest, LosslessDecodesToTheSourcePixelsExactly) {
  for (const auto& [w, h] : std::vector<std::pair<int, int>>{{37, 23}, {1, 1}, {203, 7}}) {
    const std::vector<uint8_t> rgb = PhotoLike(w, h, 21);
    absl::StatusOr<RgbImage> img = DecodeImage(EncodeWebp(rgb, w, h, 3, /*lossless=*/true));
    ASSERT_TRUE(img.ok()) << img.status();
    EXPECT_EQ(img->width, w);
    EXPECT_EQ(img->height, h);
    EXPECT_EQ(img->pixels, rgb) << w << "x" << h;
  }
}

// PIL's convert("RGB") of an RGBA image drops alpha (no compositing on any background):
// the RGB under every alpha, 0 included, comes back as it was.
TEST(WebpDecodeTest, AlphaIsDroppedNotComposited) {
  const int w = 41, h = 29;
  std::vector<uint8_t> rgba = PhotoLike(w, h, 22, 4);
  for (size_t i = 0; i < rgba.size(); i += 4 * 7) rgba[i + 3] = 0;  // some fully transparent
  const std::string webp = EncodeWebp(rgba, w, h, 4, /*lossless=*/true);
  absl::StatusOr<ImageInfo> info = ReadImageInfo(webp);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->format, ImageFormat::kWebp);
  EXPECT_TRUE(info->alpha);
  EXPECT_TRUE(info->lossless);
  absl::StatusOr<RgbImage> img = DecodeImage(webp);
  ASSERT_TRUE(img.ok()) << img.status();
  EXPECT_EQ(img->pixels, DropAlpha(rgba));
}

// Lossy has no exact source to compare with: it matches PIL (the same libwebp) byte for
// byte, with and without alpha, and resembles the source.
TEST(WebpDecodeTest, LossyMatchesPilExactly) {
  if (!testing_util::PythonHas("PIL")) GTEST_SKIP() << REFERENCE_PYTHON << " has no PIL";
  const int w = 203, h = 151;  // odd: chroma subsampling rounds up
  const std::vector<uint8_t> rgb = PhotoLike(w, h, 23);
  const std::vector<uint8_t> rgba = PhotoLike(w, h, 24, 4);
  struct Case {
    const char* name;
    std::string webp;
    std::vector<uint8_t> source_rgb;
  };
  const Case cases[] = {
      {"lossy", EncodeWebp(rgb, w, h, 3, /*lossless=*/false, 85), rgb},
      {"lossy with alpha", EncodeWebp(rgba, w, h, 4, /*lossless=*/false, 85), DropAlpha(rgba)},
      {"lossless with alpha", EncodeWebp(rgba, w, h, 4, /*lossless=*/true), DropAlpha(rgba)},
  };
  for (const Case& c : cases) {
    absl::StatusOr<RgbImage> img = DecodeImage(c.webp);
    ASSERT_TRUE(img.ok()) << c.name << ": " << img.status();
    int pw = 0, ph = 0;
    const std::vector<uint8_t> pil = PilDecode(c.webp, "image.webp", &pw, &ph);
    EXPECT_EQ(pw, w) << c.name;
    EXPECT_EQ(ph, h) << c.name;
    EXPECT_EQ(img->pixels, pil) << c.name << ", mean diff " << MeanAbsDiff(img->pixels, pil);
    EXPECT_LT(MeanAbsDiff(img->pixels, c.source_rgb), 8.0) << c.name;
  }
}

TEST(WebpDecodeTest, TheContentDecidesNotTheName) {
  const int w = 16, h = 12;
  const std::vector<uint8_t> rgb = PhotoLike(w, h, 25);
  const std::string webp = EncodeWebp(rgb, w, h, 3, /*lossless=*/true);
  // DecodeAndTransform (the serve path) equals DecodeImage + ApplyTransform.
  TransformSpec spec;
  spec.resize = 12;
  spec.crop = 10;
  std::vector<uint8_t> served(3 * 10 * 10), reference(3 * 10 * 10);
  ASSERT_TRUE(DecodeAndTransform(webp, spec, 0, served.data()).ok());
  ASSERT_TRUE(ApplyTransform(DecodeImage(webp).value(), spec, 0, reference.data()).ok());
  EXPECT_EQ(served, reference);
  spec.mode = TransformMode::kRandom;
  ASSERT_TRUE(DecodeAndTransform(webp, spec, 7, served.data()).ok());
  ASSERT_TRUE(ApplyTransform(DecodeImage(webp).value(), spec, 7, reference.data()).ok());
  EXPECT_EQ(served, reference);
}

TEST(WebpDecodeTest, DecodeBytesComeFromTheHeader) {
  const int w = 64, h = 48;
  const int64_t pixels = int64_t{w} * h;
  const std::vector<uint8_t> rgb = PhotoLike(w, h, 26);
  const std::vector<uint8_t> rgba = PhotoLike(w, h, 27, 4);
  absl::StatusOr<ImageInfo> lossy = ReadImageInfo(EncodeWebp(rgb, w, h, 3, false));
  absl::StatusOr<ImageInfo> lossy_alpha = ReadImageInfo(EncodeWebp(rgba, w, h, 4, false));
  absl::StatusOr<ImageInfo> lossless = ReadImageInfo(EncodeWebp(rgb, w, h, 3, true));
  ASSERT_TRUE(lossy.ok() && lossy_alpha.ok() && lossless.ok());
  EXPECT_FALSE(lossy->lossless);
  EXPECT_FALSE(lossy->alpha);
  EXPECT_TRUE(lossy_alpha->alpha);
  EXPECT_TRUE(lossless->lossless);
  // Never scaled: the DCT factor asked for does not change a WebP's bytes.
  EXPECT_EQ(DecodeBufferBytes(*lossy, 1, 8), pixels * 3);
  EXPECT_EQ(lossy->lossless_stream_bytes, 0);
  // A lossless stream adds its entropy tables, bounded by its bytes: the ALPH chunk's
  // for the alpha plane, the file's for a lossless image.
  EXPECT_GT(lossy_alpha->lossless_stream_bytes, 0);
  EXPECT_GT(DecodeBufferBytes(*lossy_alpha, 1, 1), pixels * (3 + 1 + 4));
  EXPECT_EQ(DecodeBufferBytes(*lossy_alpha, 1, 8), DecodeBufferBytes(*lossy_alpha, 1, 1));
  EXPECT_GT(DecodeBufferBytes(*lossless, 1, 1), pixels * (3 + 4));
}

// The alpha plane's stream is the ALPH chunk, not the whole file: a lossy file with
// alpha and a large metadata chunk is charged the same as without it.
TEST(WebpDecodeTest, AlphaTablesAreBoundedByTheAlphChunk) {
  const int w = 64, h = 48;
  const std::string plain = EncodeWebp(PhotoLike(w, h, 31, 4), w, h, 4, false);
  absl::StatusOr<ImageInfo> info = ReadImageInfo(plain);
  ASSERT_TRUE(info.ok() && info->alpha && !info->lossless);
  ASSERT_EQ(plain.substr(12, 4), "VP8X");
  // The chunks after VP8X, with 1 MB of EXIF after the image (as a camera writes it).
  std::string with_exif = plain + Chunk("EXIF", std::string(1 << 20, 'x'));
  std::string size;
  AppendLe(&size, static_cast<uint32_t>(with_exif.size() - 8), 4);
  with_exif.replace(4, 4, size);
  absl::StatusOr<ImageInfo> exif_info = ReadImageInfo(with_exif);
  ASSERT_TRUE(exif_info.ok()) << exif_info.status();
  EXPECT_LT(info->lossless_stream_bytes, static_cast<int64_t>(plain.size()));
  EXPECT_EQ(exif_info->lossless_stream_bytes, info->lossless_stream_bytes);
  EXPECT_EQ(DecodeBufferBytes(*exif_info, 1, 1), DecodeBufferBytes(*info, 1, 1));
}

// The peak resident bytes DecodeImage(encoded) adds, or -1 when it fails. Measured in
// a forked child, so that nothing else runs in the process, as the kernel's high-water
// mark of resident memory (VmHWM, reset to the current size through clear_refs): it
// counts every page the decode touches, the entropy tables libwebp frees before
// WebPDecode returns included. mallinfo2() cannot: it tells what is allocated when it
// is called, not the peak in between. The child first gives its free heap back
// (malloc_trim), so that the decode's pages are new ones and counted.
int64_t DecodePeakBytes(const std::string& encoded) {
  const auto status_kb = [](const std::string& field) -> int64_t {
    std::ifstream in("/proc/self/status");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
    }
    return -1;
  };
  int fds[2];
  if (pipe(fds) != 0) return -2;
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    malloc_trim(0);
    int64_t peak = -3;
    if (std::ofstream("/proc/self/clear_refs") << "5" << std::flush) {
      const int64_t before_kb = status_kb("VmRSS");
      const bool ok = DecodeImage(encoded).ok();
      const int64_t high_kb = status_kb("VmHWM");
      peak = ok ? (high_kb - before_kb) * 1024 : -1;
    }
    if (write(fds[1], &peak, sizeof(peak)) != sizeof(peak)) _exit(1);
    _exit(0);
  }
  close(fds[1]);
  int64_t peak = -2;
  if (read(fds[0], &peak, sizeof(peak)) != sizeof(peak)) peak = -2;
  close(fds[0]);
  waitpid(pid, nullptr, 0);
  return peak;
}

// A valid 1024x1024 lossless stream whose entropy image names 65,536 groups, each of
// five one-symbol codes: libwebp 1.2.4 writes 360 MB of tables for it before decoding
// a pixel, from 295 KB. Its count covers that: the tables of every group its bytes can
// hold (8 bits a byte / 20 bits a group) at their largest, capped by the groups a
// 1024x1024 image can name (one per 4x4 block: 65,536).
TEST(WebpDecodeTest, ManyEntropyGroupsAreCountedAtLeastWhatTheDecodeTouches) {
  const std::string hostile = testing_util::ManyEntropyGroupsWebp();
  ASSERT_LT(hostile.size(), 300u << 10);
  absl::StatusOr<ImageInfo> info = ReadImageInfo(hostile);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(info->lossless);
  EXPECT_EQ(info->width, 1024);
  absl::StatusOr<RgbImage> img = DecodeImage(hostile);
  ASSERT_TRUE(img.ok()) << img.status();
  EXPECT_EQ(img->pixels, std::vector<uint8_t>(1024 * 1024 * 3, 0));  // transparent black

  const int64_t counted = DecodeBufferBytes(*info, 1, 1);
  const int64_t touched = DecodePeakBytes(hostile);
  std::printf(
      "[ hostile ] %zu-byte 1024x1024 lossless WebP, 65536 groups: touches %.1f MB, "
      "counted %.1f MB\n",
      hostile.size(), touched / 1e6, counted / 1e6);
  ASSERT_GT(touched, 0) << "measuring failed: " << touched;
  // It is the hostile case: far above the pixels (7 bytes a pixel, 7.3 MB).
  EXPECT_GT(touched, 20 * int64_t{1024} * 1024 * 7);
  EXPECT_GE(counted, touched);

  // Under a budget of 64 MB, nine times what the pixels need, the admission refuses it
  // before anything is allocated: the server substitutes it (decode_memory_test).
  class Budget : public DecodeAdmission {
   public:
    absl::Status Acquire(int64_t bytes) override {
      asked = bytes;
      if (bytes > int64_t{64} << 20) return absl::ResourceExhaustedError("over the budget");
      return absl::OkStatus();
    }
    void Release(int64_t) override {}
    int64_t asked = 0;
  } budget;
  TransformSpec spec;
  std::vector<uint8_t> out(3 * spec.crop * spec.crop);
  const absl::Status refused = DecodeAndTransform(hostile, spec, 0, out.data(), &budget);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_EQ(budget.asked, counted);
}

// Real files with a lossless stream (libwebp's encoder at PIL's defaults: quality 80,
// method 4) of photo-like pixels: lossless, and lossy with alpha. The count still
// covers what they touch, and the figures show what the table bound charges them
// beyond it (docs/server.md).
TEST(WebpDecodeTest, RealLosslessStreamsAreCountedAtLeastWhatTheyTouch) {
  for (const bool lossless : {true, false}) {
    for (const int side : {64, 512, 1024}) {
      const int channels = lossless ? 3 : 4;
      const std::string file =
          EncodeWebp(PhotoLike(side, side, 32, channels), side, side, channels, lossless, 80);
      absl::StatusOr<ImageInfo> info = ReadImageInfo(file);
      ASSERT_TRUE(info.ok()) << info.status();
      ASSERT_TRUE(info->lossless || info->alpha);
      const int64_t counted = DecodeBufferBytes(*info, 1, 1);
      const int64_t touched = DecodePeakBytes(file);
      std::printf("[ %s ] %dx%d, %zu bytes (stream %lld): touches %.2f MB, counted %.2f MB\n",
                  lossless ? "lossless" : "lossy+alpha", side, side, file.size(),
                  static_cast<long long>(info->lossless_stream_bytes), touched / 1e6,
                  counted / 1e6);
      ASSERT_GE(touched, 0) << side;
      EXPECT_GE(counted, touched) << side;
    }
  }
}

// A header is believed only as far as the limits: a 16383 x 16383 lossless header is over
// the pixel limit, and one within it but over a decode budget is refused by the admission,
// each before any pixel buffer exists (the files hold 64 bytes of image data).
TEST(WebpDecodeTest, HugeHeadersAreRefusedBeforeAllocating) {
  const std::string huge = LosslessHeader(16383, 16383);
  absl::StatusOr<ImageInfo> info = ReadImageInfo(huge);
  ASSERT_FALSE(info.ok());
  EXPECT_THAT(info.status().message(), HasSubstr("over the"));
  EXPECT_THAT(info.status().message(), HasSubstr("pixel limit"));
  EXPECT_THAT(DecodeImage(huge).status().message(), HasSubstr("pixel limit"));
  TransformSpec spec;
  std::vector<uint8_t> out(3 * spec.crop * spec.crop);
  EXPECT_THAT(DecodeAndTransform(huge, spec, 0, out.data()).message(), HasSubstr("pixel limit"));

  // 13000 x 13000 is within the pixel limit; its decode needs 7 bytes a pixel.
  const std::string big = LosslessHeader(13000, 13000);
  info = ReadImageInfo(big);
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_LE(int64_t{13000} * 13000, internal::kMaxPixels);
  class Refusing : public DecodeAdmission {
   public:
    absl::Status Acquire(int64_t bytes) override {
      asked = bytes;
      return absl::ResourceExhaustedError("over the test budget");
    }
    void Release(int64_t) override { ADD_FAILURE() << "released bytes never acquired"; }
    int64_t asked = 0;
  } admission;
  const absl::Status refused = DecodeAndTransform(big, spec, 0, out.data(), &admission);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_EQ(admission.asked, DecodeBufferBytes(*info, 1, 1));
  EXPECT_GE(admission.asked, int64_t{13000} * 13000 * 7);

  // A lossy (VP8) frame header: 3-byte frame tag, start code, 14-bit sizes.
  std::string vp8 = {'\x50', '\x09', '\x00', '\x9d', '\x01', '\x2a'};
  AppendLe(&vp8, 16383, 2);
  AppendLe(&vp8, 16383, 2);
  vp8 += std::string(128, '\0');  // the first partition (74 bytes) lies within
  EXPECT_THAT(ReadImageInfo(Riff(Chunk("VP8 ", vp8))).status().message(), HasSubstr("pixel limit"));
}

TEST(WebpDecodeTest, AnAnimationIsRefusedWithAClearError) {
  // A real one-frame animation: VP8X (animation flag), ANIM, and an ANMF frame around a
  // lossless bitstream.
  const int w = 8, h = 6;
  const std::string still = EncodeWebp(PhotoLike(w, h, 28), w, h, 3, /*lossless=*/true);
  const std::string frame_chunk = still.substr(12);  // "VP8L" + size + bitstream
  std::string vp8x(1, '\x02');                       // the animation flag
  vp8x += std::string(3, '\0');
  AppendLe(&vp8x, w - 1, 3);
  AppendLe(&vp8x, h - 1, 3);
  std::string anim;
  AppendLe(&anim, 0xFFFFFFFF, 4);  // background colour
  AppendLe(&anim, 0, 2);           // loop forever
  std::string anmf;
  AppendLe(&anmf, 0, 3);      // x / 2
  AppendLe(&anmf, 0, 3);      // y / 2
  AppendLe(&anmf, w - 1, 3);  // frame width - 1
  AppendLe(&anmf, h - 1, 3);  // frame height - 1
  AppendLe(&anmf, 100, 3);    // duration (ms)
  anmf.push_back('\0');       // blending and disposal
  anmf += frame_chunk;
  const std::string animated =
      Riff(Chunk("VP8X", vp8x) + Chunk("ANIM", anim) + Chunk("ANMF", anmf));
  for (const absl::Status& s : {ReadImageInfo(animated).status(), DecodeImage(animated).status()}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("animated WebP"));
    EXPECT_THAT(s.message(), HasSubstr("only still WebP images are decoded"));
    EXPECT_TRUE(IsUnsupportedImageFormat(s)) << "counted apart from corrupt files";
  }
}

TEST(WebpDecodeTest, TruncatedFilesAreErrorsAtEveryLength) {
  const int w = 48, h = 40;
  const std::vector<uint8_t> rgba = PhotoLike(w, h, 29, 4);
  for (const bool lossless : {false, true}) {
    const std::string full = EncodeWebp(rgba, w, h, 4, lossless, 80);
    ASSERT_TRUE(DecodeImage(full).ok());
    for (size_t len = 0; len < full.size(); ++len) {
      absl::StatusOr<RgbImage> img = DecodeImage(full.substr(0, len));
      EXPECT_FALSE(img.ok()) << (lossless ? "lossless" : "lossy") << ", length " << len << " of "
                             << full.size();
    }
  }
  const std::string lossy = EncodeWebp(rgba, w, h, 4, false, 80);
  EXPECT_THAT(DecodeImage(lossy.substr(0, lossy.size() / 2)).status().message(),
              HasSubstr("not enough data (truncated)"));
}

TEST(WebpDecodeTest, CorruptFilesAreErrorsOrDecodeAtTheirSizeNeverCrash) {
  const int w = 64, h = 48;
  const std::vector<uint8_t> rgb = PhotoLike(w, h, 30);
  const std::string lossy = EncodeWebp(rgb, w, h, 3, false);
  const std::string lossless = EncodeWebp(rgb, w, h, 3, true);
  // A broken signature in the bitstream is an error naming the WebP.
  std::string bad_signature = lossless;
  bad_signature[20] = '\x00';  // the VP8L signature byte 0x2f
  EXPECT_THAT(DecodeImage(bad_signature).status().message(), HasSubstr("WebP"));
  std::mt19937 rng(43);
  int failures = 0, total = 0;
  for (const std::string* base : {&lossy, &lossless}) {
    for (int trial = 0; trial < 300; ++trial) {
      std::string bad = *base;
      const int flips = 1 + static_cast<int>(rng() % 8);
      for (int i = 0; i < flips; ++i) {
        bad[12 + rng() % (bad.size() - 12)] ^= static_cast<char>(1 + rng() % 255);
      }
      absl::StatusOr<RgbImage> img = DecodeImage(bad);
      ++total;
      if (!img.ok()) {
        ++failures;
        EXPECT_THAT(img.status().message(), HasSubstr("WebP"));
      } else {
        EXPECT_EQ(img->pixels.size(), static_cast<size_t>(img->width) * img->height * 3);
      }
    }
  }
  for (int trial = 0; trial < 200; ++trial) {  // random bytes behind the RIFF/WEBP magic
    std::string bad(12 + rng() % 2000, '\0');
    for (char& c : bad) c = static_cast<char>(rng());
    bad.replace(0, 4, "RIFF");
    bad.replace(8, 4, "WEBP");
    EXPECT_FALSE(DecodeImage(bad).ok());
  }
  std::printf("[ garbage ] %d of %d byte-flipped WebP files rejected, the rest decoded\n", failures,
              total);
}

}  // namespace
}  // namespace shardcast
