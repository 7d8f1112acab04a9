// The client's decode of encoded batches, on real JPEG, PNG and WebP bytes with the crops
// the server plans (PlanEncodedSample): every sample's pixels equal DecodeAndTransform's
// (server delivery's) byte for byte, also from a lossless cut; padding is zeros; the
// server's substitutes and a corrupt image decoded here are every byte 128 (marked and
// counted); an image whose decode buffers are over the client's limit is refused from
// its header; several threads make what one thread makes.
#include "client/decode/encoded_batch_decoder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/image/image_transform.h"
#include "shardcast/v1/shardcast.pb.h"
#include "tests/common/image_test_util.h"

namespace shardcast::client {
namespace {

using ::testing::Each;
using ::testing::HasSubstr;
using testing_util::EncodeJpeg;
using testing_util::EncodePng;
using testing_util::EncodeWebp;
using testing_util::PhotoLike;
namespace v1 = ::shardcast::v1;

constexpr int kCrop = 96;
constexpr int64_t kSampleBytes = 3 * kCrop * kCrop;

TransformSpec Spec(TransformMode mode, bool dct) {
  TransformSpec spec;
  spec.mode = mode;
  spec.resize = 112;
  spec.crop = kCrop;
  spec.dct_scaling = dct;
  return spec;
}

// Real images of several formats, sizes and JPEG subsamplings.
std::vector<std::string> Images() {
  std::vector<std::string> images;
  const int sizes[][2] = {{500, 375}, {333, 517}, {640, 427}};
  uint32_t seed = 3;
  for (const auto& size : sizes) {
    const int w = size[0], h = size[1];
    const std::vector<uint8_t> px = PhotoLike(w, h, seed++);
    images.push_back(EncodeJpeg(px, w, h, TJSAMP_420));
    images.push_back(EncodeJpeg(px, w, h, TJSAMP_444));
    images.push_back(EncodeJpeg(px, w, h, TJSAMP_422, 85, TJFLAG_PROGRESSIVE));
    images.push_back(EncodePng(px, w, h, PNG_COLOR_TYPE_RGB, 8));
    images.push_back(EncodeWebp(px, w, h, 3, /*lossless=*/false));
  }
  return images;
}

// What the server sends for `image` drawn with `seed`: the image as stored and its crop.
v1::EncodedImage Encoded(const std::string& image, const TransformSpec& spec, uint64_t seed) {
  absl::StatusOr<EncodedPlan> plan = PlanEncodedSample(image, spec, seed);
  EXPECT_TRUE(plan.ok()) << plan.status();
  v1::EncodedImage e;
  e.set_data(image);
  e.set_source_width(plan->crop.source_width);
  e.set_source_height(plan->crop.source_height);
  e.set_left(plan->crop.left);
  e.set_top(plan->crop.top);
  e.set_width(plan->crop.width);
  e.set_height(plan->crop.height);
  e.set_resize_width(plan->crop.resize_width);
  e.set_resize_height(plan->crop.resize_height);
  e.set_flip(plan->crop.flip);
  e.set_output_size(plan->crop.output);
  return e;
}

// An encoded batch's header with no samples yet.
v1::Batch EmptyBatch() {
  v1::Batch batch;
  for (int64_t d : {0, 3, kCrop, kCrop}) batch.add_shape(d);
  return batch;
}

v1::SampleInfo* AddSample(v1::Batch* batch, const std::string& key) {
  batch->set_shape(0, batch->shape(0) + 1);
  v1::SampleInfo* info = batch->add_samples();
  info->set_key(key);
  info->set_shard(7);
  info->set_valid(true);
  batch->add_labels(1);
  return info;
}

std::vector<uint8_t> Sample(const std::vector<uint8_t>& pixels, int i) {
  return {pixels.begin() + i * kSampleBytes, pixels.begin() + (i + 1) * kSampleBytes};
}

std::vector<uint8_t> DecodeAll(EncodedBatchDecoder& decoder, v1::Batch* batch,
                               std::vector<DecodeFailure>* failures = nullptr) {
  std::vector<uint8_t> pixels(static_cast<size_t>(batch->shape(0) * kSampleBytes), 0xEE);
  std::vector<DecodeFailure> failed = decoder.Decode(batch, pixels.data());
  if (failures != nullptr) *failures = std::move(failed);
  return pixels;
}

TEST(EncodedBatchDecoderTest, PixelsEqualServerDeliveryForEveryFormatModeAndDctScaling) {
  const std::vector<std::string> images = Images();
  for (TransformMode mode : {TransformMode::kCenter, TransformMode::kRandom}) {
    for (bool dct : {false, true}) {
      const TransformSpec spec = Spec(mode, dct);
      v1::Batch batch = EmptyBatch();
      std::vector<uint64_t> seeds;
      for (size_t i = 0; i < images.size(); ++i) {
        seeds.push_back(1000 + 17 * i);
        *AddSample(&batch, absl::StrFormat("k%d", i))->mutable_encoded() =
            Encoded(images[i], spec, seeds.back());
      }
      EncodedBatchDecoder decoder({mode, dct, /*threads=*/3});
      std::vector<DecodeFailure> failures;
      const std::vector<uint8_t> pixels = DecodeAll(decoder, &batch, &failures);
      EXPECT_TRUE(failures.empty());
      for (size_t i = 0; i < images.size(); ++i) {
        std::vector<uint8_t> server(kSampleBytes);
        ASSERT_TRUE(DecodeAndTransform(images[i], spec, seeds[i], server.data()).ok());
        EXPECT_EQ(Sample(pixels, static_cast<int>(i)), server)
            << "image " << i << " mode " << TransformModeName(mode) << " dct " << dct;
        EXPECT_FALSE(batch.samples(static_cast<int>(i)).substituted());
      }
      EXPECT_EQ(decoder.substituted(), 0);
    }
  }
}

// `jpeg` cut losslessly (tjTransform, TJXOPT_CROP) at (left, top) to its right and bottom
// edges; left and top on the MCU grid.
std::string CutJpeg(const std::string& jpeg, int left, int top, int width, int height) {
  tjhandle tj = tjInitTransform();
  tjtransform transform{};
  transform.r = {left, top, width - left, height - top};
  transform.op = TJXOP_NONE;
  transform.options = TJXOPT_CROP;
  unsigned char* out = nullptr;
  unsigned long size = 0;
  const int failed = tjTransform(tj, reinterpret_cast<const unsigned char*>(jpeg.data()),
                                 jpeg.size(), 1, &out, &size, &transform, 0);
  EXPECT_EQ(failed, 0) << tjGetErrorStr2(tj);
  std::string cut(reinterpret_cast<char*>(out), size);
  tjFree(out);
  tjDestroy(tj);
  return cut;
}

TEST(EncodedBatchDecoderTest, ACropOfALosslessCutCountsFromTheCut) {
  const int w = 640, h = 480, cut_left = 160, cut_top = 128;
  const std::string jpeg = EncodeJpeg(PhotoLike(w, h, 8), w, h, TJSAMP_420);
  const std::string cut = CutJpeg(jpeg, cut_left, cut_top, w, h);
  int compared = 0;
  for (bool dct : {false, true}) {
    const TransformSpec spec = Spec(TransformMode::kRandom, dct);
    v1::Batch batch = EmptyBatch();
    std::vector<uint64_t> seeds;
    for (uint64_t seed = 1; seeds.size() < 4 && seed < 500; ++seed) {
      absl::StatusOr<EncodedPlan> plan = PlanEncodedSample(jpeg, spec, seed);
      ASSERT_TRUE(plan.ok());
      absl::StatusOr<SourceRect> read = SourcePixelsRead(plan->info, plan->crop, dct);
      ASSERT_TRUE(read.ok());
      // Room for chroma upsampling at the cut's edge.
      if (read->left < cut_left + 16 || read->top < cut_top + 16) continue;
      seeds.push_back(seed);
      v1::EncodedImage e = Encoded(jpeg, spec, seed);
      e.set_data(cut);
      e.set_cut_left(cut_left);
      e.set_cut_top(cut_top);
      e.set_cut_width(w - cut_left);
      e.set_cut_height(h - cut_top);
      e.set_left(e.left() - cut_left);
      e.set_top(e.top() - cut_top);
      *AddSample(&batch, "cut")->mutable_encoded() = e;
    }
    ASSERT_EQ(seeds.size(), 4u);
    EncodedBatchDecoder decoder({TransformMode::kRandom, dct, 2});
    std::vector<DecodeFailure> failures;
    const std::vector<uint8_t> pixels = DecodeAll(decoder, &batch, &failures);
    ASSERT_TRUE(failures.empty()) << failures[0].notice;
    for (size_t i = 0; i < seeds.size(); ++i) {
      std::vector<uint8_t> server(kSampleBytes);
      ASSERT_TRUE(DecodeAndTransform(jpeg, spec, seeds[i], server.data()).ok());
      EXPECT_EQ(Sample(pixels, static_cast<int>(i)), server)
          << "seed " << seeds[i] << " dct " << dct;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 8);
}

TEST(EncodedBatchDecoderTest, PaddingIsZerosAndTheServersSubstituteIs128) {
  const std::string jpeg = EncodeJpeg(PhotoLike(200, 150, 1), 200, 150, TJSAMP_420);
  const TransformSpec spec = Spec(TransformMode::kCenter, false);
  v1::Batch batch = EmptyBatch();
  *AddSample(&batch, "ok")->mutable_encoded() = Encoded(jpeg, spec, 0);
  v1::SampleInfo* substituted = AddSample(&batch, "server-substituted");
  substituted->set_substituted(true);
  substituted->mutable_encoded()->set_output_size(kCrop);
  v1::SampleInfo* padding = AddSample(&batch, "");
  padding->set_valid(false);
  batch.set_labels(2, -1);

  EncodedBatchDecoder decoder({TransformMode::kCenter, false, 2});
  const std::vector<uint8_t> pixels = DecodeAll(decoder, &batch);
  EXPECT_THAT(Sample(pixels, 1), Each(128));
  EXPECT_THAT(Sample(pixels, 2), Each(0));
  EXPECT_FALSE(batch.samples(2).substituted());
  EXPECT_EQ(decoder.substituted(), 0);  // the server's substitute is not this client's
}

TEST(EncodedBatchDecoderTest, ACorruptImageIsTheSubstituteMarkedCountedAndNamed) {
  const TransformSpec spec = Spec(TransformMode::kRandom, true);
  const std::string jpeg = EncodeJpeg(PhotoLike(300, 200, 2), 300, 200, TJSAMP_420);
  v1::Batch batch = EmptyBatch();
  *AddSample(&batch, "good")->mutable_encoded() = Encoded(jpeg, spec, 5);
  v1::EncodedImage truncated = Encoded(jpeg, spec, 6);
  truncated.set_data(jpeg.substr(0, jpeg.size() / 2));  // the header reads, the scan ends early
  *AddSample(&batch, "bad\xff")->mutable_encoded() = truncated;
  v1::EncodedImage garbage = Encoded(jpeg, spec, 7);
  garbage.set_data("not an image at all");
  *AddSample(&batch, "garbage")->mutable_encoded() = garbage;

  EncodedBatchDecoder decoder({TransformMode::kRandom, true, 2});
  std::vector<DecodeFailure> failures;
  const std::vector<uint8_t> pixels = DecodeAll(decoder, &batch, &failures);
  ASSERT_EQ(failures.size(), 2u);
  EXPECT_EQ(failures[0].sample, 1);
  EXPECT_THAT(failures[0].notice, HasSubstr("shard 7 key 'bad\\xff'"));
  EXPECT_EQ(failures[1].sample, 2);
  EXPECT_THAT(Sample(pixels, 1), Each(128));
  EXPECT_THAT(Sample(pixels, 2), Each(128));
  EXPECT_FALSE(batch.samples(0).substituted());
  EXPECT_TRUE(batch.samples(1).substituted());
  EXPECT_TRUE(batch.samples(2).substituted());
  EXPECT_EQ(decoder.substituted(), 2);
  DecodeAll(decoder, &batch);  // the count adds up over batches
  EXPECT_EQ(decoder.substituted(), 4);
}

// A baseline JPEG whose frame header claims `width` x `height`: the header reads, the
// pixels would need the claimed size's buffers.
std::string ClaimingSize(std::string jpeg, int width, int height) {
  const size_t sof = jpeg.find("\xff\xc0");
  EXPECT_NE(sof, std::string::npos);
  jpeg[sof + 5] = static_cast<char>(height >> 8);
  jpeg[sof + 6] = static_cast<char>(height & 0xff);
  jpeg[sof + 7] = static_cast<char>(width >> 8);
  jpeg[sof + 8] = static_cast<char>(width & 0xff);
  return jpeg;
}

TEST(EncodedBatchDecoderTest, ADecompressionBombIsRefusedFromItsHeaderUnderTheLimit) {
  const TransformSpec spec = Spec(TransformMode::kCenter, false);
  const std::string small = EncodeJpeg(PhotoLike(64, 64, 4), 64, 64, TJSAMP_444);
  const std::string bomb = ClaimingSize(small, 12000, 12000);  // ~412 MiB of pixels
  ASSERT_EQ(ReadImageInfo(bomb)->width, 12000);
  v1::Batch batch = EmptyBatch();
  *AddSample(&batch, "bomb")->mutable_encoded() = Encoded(bomb, spec, 0);
  *AddSample(&batch, "small")->mutable_encoded() = Encoded(small, spec, 0);

  EncodedBatchDecoder decoder(
      {TransformMode::kCenter, false, 2, /*max_decode_memory_bytes=*/64 << 20});
  std::vector<DecodeFailure> failures;
  const std::vector<uint8_t> pixels = DecodeAll(decoder, &batch, &failures);
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].sample, 0);
  EXPECT_THAT(failures[0].notice, HasSubstr("more than the client's decode memory limit (64MiB)"));
  EXPECT_THAT(Sample(pixels, 0), Each(128));
  std::vector<uint8_t> server(kSampleBytes);
  ASSERT_TRUE(DecodeAndTransform(small, spec, 0, server.data()).ok());
  EXPECT_EQ(Sample(pixels, 1), server);
}

TEST(EncodedBatchDecoderTest, SeveralThreadsMakeWhatOneThreadMakes) {
  const std::vector<std::string> images = Images();
  const TransformSpec spec = Spec(TransformMode::kRandom, true);
  v1::Batch batch = EmptyBatch();
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < images.size(); ++i) {
      *AddSample(&batch, "k")->mutable_encoded() = Encoded(images[i], spec, 31 * round + i);
    }
  }
  v1::Batch again = batch;
  EncodedBatchDecoder one({TransformMode::kRandom, true, 1});
  EncodedBatchDecoder four({TransformMode::kRandom, true, 4});
  EXPECT_EQ(one.threads(), 1);
  EXPECT_EQ(four.threads(), 4);
  const std::vector<uint8_t> by_one = DecodeAll(one, &batch);
  EXPECT_EQ(DecodeAll(four, &again), by_one);
  EXPECT_EQ(DecodeAll(four, &again), by_one);  // and batch after batch
  EXPECT_GE(EncodedBatchDecoder({TransformMode::kRandom, true, 0}).threads(), 1);
}

}  // namespace
}  // namespace shardcast::client
