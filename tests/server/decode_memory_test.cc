// Decode memory is bounded server-wide: 64 solid-colour 12000x14900 PNGs (536 MB each
// once decoded, under 1 MB compressed) served on every decode thread at once stay
// within --max-decode-memory by the server's own accounting, and every image is still
// decoded and served right; an image that alone needs more than the budget is
// substituted and counted, never allocated, a small lossless WebP whose entropy tables
// would take hundreds of MB included.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "client/stream/rank_stream.h"
#include "tests/server/server_test_support.h"
#include "tests/support/hostile_webp.h"
#include "tests/support/solid_png.h"
#include "tools/pack/tar_writer.h"

namespace shardcast::server_testing {
namespace {

constexpr int kWidth = 12000;
constexpr int kHeight = 14900;  // 178.8 M pixels: just under the decoder's pixel limit
constexpr int kImages = 64;

// Bytes one such image needs to decode (DecodeBufferBytes for a PNG).
constexpr int64_t kImageDecodeBytes = int64_t{kWidth} * kHeight * 3 + int64_t{kHeight} * 8;

TEST(DecodeMemoryTest, SixtyFourHugePngsOnAllThreadsStayWithinTheBudget) {
  TempDir dir;
  // Two colours, so that a sample served with another's pixels would show.
  const std::string red = testing_util::SolidPng(kWidth, kHeight, 200, 30, 60);
  const std::string blue = testing_util::SolidPng(kWidth, kHeight, 20, 40, 220);
  ASSERT_FALSE(red.empty());
  ASSERT_LT(red.size(), 1u << 20);
  {
    absl::StatusOr<std::unique_ptr<pack::TarWriter>> tar =
        pack::TarWriter::Open(dir.path() + "/shard-0.tar");
    ASSERT_TRUE(tar.ok()) << tar.status();
    for (int i = 0; i < kImages; ++i) {
      const std::string key = absl::StrCat("huge", i);
      ASSERT_TRUE((*tar)->AddMember(key + ".png", i % 2 == 0 ? red : blue).ok());
      ASSERT_TRUE((*tar)->AddMember(key + ".cls", absl::StrCat(i % 2)).ok());
    }
    ASSERT_TRUE((*tar)->Close().ok());
  }
  server::ServerOptions options;
  options.decode_threads = 8;  // more threads than the budget admits images
  options.max_decode_memory_bytes = kImageDecodeBytes * 5 / 2;  // two images at a time
  options.max_member_bytes = 1 << 20;
  InProcessServer server(dir.path(), options);

  client::RankStreamOptions stream_options;
  stream_options.server = server.target();
  stream_options.job = MakeRegister("huge", /*rank=*/0, /*world=*/1, /*batch=*/16);
  stream_options.job.mutable_transform()->set_resize(16);
  stream_options.job.mutable_transform()->set_crop(16);
  stream_options.prefetch = 4;  // every batch's samples queued on the pool at once
  // A batch of these takes tens of seconds on a loaded 2-core machine: no stall
  // deadline (a reconnect would only redo the work).
  stream_options.stream_timeout_seconds = 0;
  absl::StatusOr<std::unique_ptr<client::RankStream>> stream =
      client::RankStream::Connect(stream_options);
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_EQ((*stream)->batches_per_epoch(), kImages / 16);
  ASSERT_TRUE((*stream)->StartEpoch(0, 0).ok());
  int served = 0;
  while (true) {
    absl::StatusOr<std::optional<client::ReceivedBatch>> next = (*stream)->Next();
    ASSERT_TRUE(next.ok()) << next.status();
    if (!next->has_value()) break;
    const v1::Batch& batch = (**next)->header();
    const std::string images = (**next)->ImagesToString();
    const size_t sample_bytes = 3 * 16 * 16;
    for (int i = 0; i < batch.samples_size(); ++i) {
      ++served;
      EXPECT_FALSE(batch.samples(i).substituted()) << batch.samples(i).key();
      const bool is_red = batch.labels(i) == 0;
      const std::string pixels = images.substr(i * sample_bytes, sample_bytes);
      // Planar RGB: 256 bytes of each channel, the solid colour exactly.
      EXPECT_EQ(pixels.substr(0, 256), std::string(256, static_cast<char>(is_red ? 200 : 20)));
      EXPECT_EQ(pixels.substr(256, 256), std::string(256, static_cast<char>(is_red ? 30 : 40)));
      EXPECT_EQ(pixels.substr(512, 256), std::string(256, static_cast<char>(is_red ? 60 : 220)));
    }
  }
  EXPECT_EQ(served, kImages);

  const v1::GetStatusResponse status = GetStatus(server.stub());
  EXPECT_EQ(status.decode_memory_limit_bytes(), options.max_decode_memory_bytes);
  EXPECT_LE(status.decode_memory_peak_bytes(), status.decode_memory_limit_bytes());
  EXPECT_GE(status.decode_memory_peak_bytes(), kImageDecodeBytes);  // it did decode them
  EXPECT_EQ(status.decode_memory_in_use_bytes(), 0);
  EXPECT_EQ(status.images_over_decode_memory(), 0);
  EXPECT_EQ(status.substitutions(), 0);
  // Eight threads, room for two images: the others waited their turn.
  EXPECT_GT(status.decode_memory_waits(), 0);
  EXPECT_EQ(status.decode_task_exceptions(), 0);
}

TEST(DecodeMemoryTest, AnImageAloneOverTheBudgetIsSubstitutedWithoutDecoding) {
  TempDir dir;
  const std::string png = testing_util::SolidPng(kWidth, kHeight, 1, 2, 3);
  ASSERT_FALSE(png.empty());
  {
    absl::StatusOr<std::unique_ptr<pack::TarWriter>> tar =
        pack::TarWriter::Open(dir.path() + "/shard-0.tar");
    ASSERT_TRUE(tar.ok()) << tar.status();
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE((*tar)->AddMember(absl::StrCat("k", i, ".png"), png).ok());
      ASSERT_TRUE((*tar)->AddMember(absl::StrCat("k", i, ".cls"), "0").ok());
    }
    ASSERT_TRUE((*tar)->Close().ok());
  }
  server::ServerOptions options;
  options.max_decode_memory_bytes = 64 << 20;  // far below one image
  InProcessServer server(dir.path(), options);
  const StreamResult result = [&] {
    v1::RegisterResponse job;
    EXPECT_TRUE(Register(server.stub(), MakeRegister("small-budget", 0, 1, 4), &job).ok());
    return StreamAll(server.stub(), "small-budget", 0, 0, 0);
  }();
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  ASSERT_EQ(result.batches.size(), 1u);
  for (const v1::SampleInfo& info : result.batches[0].samples()) EXPECT_TRUE(info.substituted());
  const v1::GetStatusResponse status = GetStatus(server.stub());
  EXPECT_EQ(status.images_over_decode_memory(), 4);
  EXPECT_EQ(status.substitutions(), 4);
  EXPECT_EQ(status.decode_memory_peak_bytes(), 0);  // nothing was admitted
}

// A 295 KB lossless WebP naming 65,536 entropy groups: its pixels need 7 MB, its tables
// hundreds (webp_decode_test). Under a 64 MB budget it is substituted and counted,
// never decoded.
TEST(DecodeMemoryTest, AWebpWithTablesOverTheBudgetIsSubstitutedWithoutDecoding) {
  TempDir dir;
  const std::string webp = testing_util::ManyEntropyGroupsWebp();
  {
    absl::StatusOr<std::unique_ptr<pack::TarWriter>> tar =
        pack::TarWriter::Open(dir.path() + "/shard-0.tar");
    ASSERT_TRUE(tar.ok()) << tar.status();
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE((*tar)->AddMember(absl::StrCat("k", i, ".webp"), webp).ok());
      ASSERT_TRUE((*tar)->AddMember(absl::StrCat("k", i, ".cls"), "0").ok());
    }
    ASSERT_TRUE((*tar)->Close().ok());
  }
  server::ServerOptions options;
  options.max_decode_memory_bytes = 64 << 20;  // nine times the pixels, below the tables
  InProcessServer server(dir.path(), options);
  const StreamResult result = [&] {
    v1::RegisterResponse job;
    EXPECT_TRUE(Register(server.stub(), MakeRegister("webp-tables", 0, 1, 4), &job).ok());
    return StreamAll(server.stub(), "webp-tables", 0, 0, 0);
  }();
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  ASSERT_EQ(result.batches.size(), 1u);
  for (const v1::SampleInfo& info : result.batches[0].samples()) EXPECT_TRUE(info.substituted());
  const v1::GetStatusResponse status = GetStatus(server.stub());
  EXPECT_EQ(status.images_over_decode_memory(), 4);
  EXPECT_EQ(status.substitutions(), 4);
  EXPECT_EQ(status.decode_memory_peak_bytes(), 0);  // nothing was admitted
}

}  // namespace
}  // namespace shardcast::server_testing
