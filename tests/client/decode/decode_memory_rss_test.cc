// A client's decode memory is bounded as a whole: with the most decode threads a stream
// may have (kMaxDecodeThreads, 1,024) on large PNGs, real bytes through the real decoder,
// what the process holds after two batches grows by less than max_decode_memory, because
// a decode thread keeps no buffer past its decode (docs/python.md, "Decode memory").
// Resident memory is read from /proc/self/statm.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "client/base/stream_settings.h"
#include "client/decode/encoded_batch_decoder.h"
#include "common/image/image_transform.h"
#include "shardcast/v1/shardcast.pb.h"
#include "tests/common/image_test_util.h"

namespace shardcast::client {
namespace {

namespace v1 = ::shardcast::v1;

constexpr int kSide = 1600;  // 7.7 MB of RGB a decode
constexpr int kCrop = 64;
constexpr int kSamples = 64;                   // nearly a decode thread each
constexpr int64_t kLimit = int64_t{64} << 20;  // eight decodes at once

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// A large PNG that is quick to make and to inflate (smooth pixels): the decode's buffer
// is what the test is about, not zlib's time.
std::string LargePng() {
  std::vector<uint8_t> px(static_cast<size_t>(kSide) * kSide * 3);
  for (int y = 0; y < kSide; ++y) {
    for (int x = 0; x < kSide; ++x) {
      uint8_t* p = px.data() + (static_cast<size_t>(y) * kSide + x) * 3;
      p[0] = static_cast<uint8_t>(x / 7);
      p[1] = static_cast<uint8_t>(y / 7);
      p[2] = static_cast<uint8_t>((x + y) / 13);
    }
  }
  return testing_util::EncodePng(px, kSide, kSide, PNG_COLOR_TYPE_RGB, 8);
}

// The batch the server sends for kSamples copies of `png`, center-cropped.
v1::Batch EncodedBatch(const std::string& png, const TransformSpec& spec) {
  absl::StatusOr<EncodedPlan> plan = PlanEncodedSample(png, spec, 0);
  EXPECT_TRUE(plan.ok()) << plan.status();
  v1::Batch batch;
  for (int64_t d : {kSamples, 3, kCrop, kCrop}) batch.add_shape(d);
  for (int i = 0; i < kSamples; ++i) {
    v1::SampleInfo* info = batch.add_samples();
    info->set_key("big" + std::to_string(i));
    info->set_valid(true);
    batch.add_labels(0);
    v1::EncodedImage* e = info->mutable_encoded();
    e->set_data(png);
    e->set_source_width(plan->crop.source_width);
    e->set_source_height(plan->crop.source_height);
    e->set_left(plan->crop.left);
    e->set_top(plan->crop.top);
    e->set_width(plan->crop.width);
    e->set_height(plan->crop.height);
    e->set_resize_width(plan->crop.resize_width);
    e->set_resize_height(plan->crop.resize_height);
    e->set_output_size(plan->crop.output);
  }
  return batch;
}

TEST(ClientDecodeMemoryRssTest, TheMostDecodeThreadsOnLargePngsHoldLessThanTheBound) {
  TransformSpec spec;
  spec.resize = kCrop;
  spec.crop = kCrop;
  const std::string png = LargePng();
  absl::StatusOr<EncodedPlan> plan = PlanEncodedSample(png, spec, 0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Each decode is admitted for its whole image: at most eight at once.
  ASSERT_GE(plan->decode_bytes, int64_t{kSide} * kSide * 3);
  ASSERT_GT(plan->decode_bytes * 9, kLimit);
  const v1::Batch batch = EncodedBatch(png, spec);

  EncodedBatchDecoderOptions options;
  options.mode = spec.mode;
  options.threads = kMaxDecodeThreads;
  options.max_decode_memory_bytes = kLimit;
  EncodedBatchDecoder decoder(options);
  ASSERT_EQ(decoder.threads(), kMaxDecodeThreads);
  std::vector<uint8_t> pixels(static_cast<size_t>(kSamples) * 3 * kCrop * kCrop);

  const int64_t before = ResidentBytes();
  for (int round = 0; round < 2; ++round) {
    v1::Batch received = batch;
    EXPECT_TRUE(decoder.Decode(&received, pixels.data()).empty());
  }
  const int64_t grown = ResidentBytes() - before;
  std::printf(
      "[ rss ] %d threads, %d PNGs of %dx%d a batch, two batches: %+.1f MiB "
      "(max_decode_memory %.0f MiB)\n",
      decoder.threads(), kSamples, kSide, kSide, grown / 1048576.0, kLimit / 1048576.0);
  EXPECT_LT(grown, kLimit);
  // The pixels are the decode's (not the substitute's 128 everywhere).
  EXPECT_NE(pixels[0], pixels[3 * kCrop * kCrop - 1]);
}

}  // namespace
}  // namespace shardcast::client
