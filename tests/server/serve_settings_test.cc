// The server settings in the job fingerprint (issue 35), as ServeSettingsFor works them
// out for a dataset: each limit as it applies to the data, 0 where nothing reaches it.
#include <gtest/gtest.h>

#include "common/image/image_decode_internal.h"
#include "common/image/image_transform.h"
#include "common/shards/dataset_index.h"
#include "server/serving/job_registry.h"
#include "tests/server/server_test_support.h"

namespace shardcast::server_testing {
namespace {

using server::DecodeNeedBound;
using server::ServeSettingsFor;

// The decode limit is folded in as 0 at or above DecodeNeedBound: so no image the
// decoder accepts may need more (the worst shapes: progressive CMYK JPEGs at the
// largest side and square, their blocks padded; a PNG one pixel wide; WebPs whose
// lossless streams, the image's or its alpha plane's, are long enough to name 65,536
// entropy groups).
TEST(ServeSettingsTest, NoAcceptedImageNeedsMoreThanTheDecodeBound) {
  const int64_t max_pixels = internal::kMaxPixels;
  std::vector<ImageInfo> worst;
  for (const auto& [w, h] :
       std::vector<std::pair<int64_t, int64_t>>{{65500, max_pixels / 65500},
                                                {13377, 13377},
                                                {65489, max_pixels / 65489},
                                                {max_pixels / 65489, 65489},
                                                {16 * 836 + 1, max_pixels / (16 * 836 + 1)}}) {
    ASSERT_LE(w * h, max_pixels);
    ImageInfo jpeg;
    jpeg.width = static_cast<int>(w);
    jpeg.height = static_cast<int>(h);
    jpeg.format = ImageFormat::kJpeg;
    jpeg.cmyk = true;
    jpeg.progressive = true;
    jpeg.components = 4;
    worst.push_back(jpeg);
  }
  ImageInfo png;
  png.width = 1;
  png.height = static_cast<int>(max_pixels);
  worst.push_back(png);
  ImageInfo webp;  // lossy with alpha: the alpha plane and its lossless decode beside
  webp.format = ImageFormat::kWebp;
  webp.width = 16383;
  webp.height = static_cast<int>(max_pixels / 16383);
  webp.alpha = true;
  webp.lossless_stream_bytes = int64_t{1} << 32;
  worst.push_back(webp);
  ImageInfo lossless = webp;
  lossless.width = 16384;
  lossless.height = static_cast<int>(max_pixels / 16384);
  lossless.alpha = false;
  lossless.lossless = true;
  worst.push_back(lossless);
  lossless.width = lossless.height = 13377;
  worst.push_back(lossless);
  for (const ImageInfo& info : worst) {
    EXPECT_LE(DecodeBufferBytes(info, 1, 1), DecodeNeedBound())
        << info.width << "x" << info.height << " format " << static_cast<int>(info.format);
  }
}

TEST(ServeSettingsTest, LimitsAreKeptOnlyWhereTheDataReachesThem) {
  TempDir dir;
  MakeDataset(dir.path(), /*samples=*/20, /*per_shard=*/10);
  absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(dir.path(), IndexOptions{});
  ASSERT_TRUE(index.ok()) << index.status();
  uint64_t largest = 0;
  for (const ShardInfo& shard : index->shards) {
    for (const SampleEntry& s : shard.samples) {
      largest = std::max(largest, s.members[s.image_member].size);
    }
  }
  ASSERT_GT(largest, 100u);
  const int64_t big = static_cast<int64_t>(largest);
  const int64_t bound = DecodeNeedBound();

  const ServeSettings roomy = ServeSettingsFor(*index, big, bound, false);
  EXPECT_EQ(roomy.max_member_bytes, 0);  // a member of exactly the limit is read
  EXPECT_EQ(roomy.max_decode_bytes, 0);
  EXPECT_EQ(roomy.max_pixels, internal::kMaxPixels);
  EXPECT_FALSE(roomy.resend_first_batch);
  const ServeSettings roomier = ServeSettingsFor(*index, int64_t{64} << 20, 2 * bound, false);
  EXPECT_EQ(ServeSettingsString(roomier), ServeSettingsString(roomy));

  const ServeSettings tight = ServeSettingsFor(*index, big - 1, bound - 1, true);
  EXPECT_EQ(tight.max_member_bytes, big - 1);
  EXPECT_EQ(tight.max_decode_bytes, bound - 1);
  EXPECT_TRUE(tight.resend_first_batch);
}

}  // namespace
}  // namespace shardcast::server_testing
