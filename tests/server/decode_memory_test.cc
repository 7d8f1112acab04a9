// Decode memory is bounded server-wide: 64 solid-colour 12000x14900 PNGs (536 MB each
// once decoded, under 1 MB compressed) served on every decode thread at once stay
// within --max-decode-memory by the server's own accounting, and every image is still
// decoded and served right; an image that alone needs more than the budget is
// substituted and counted, never allocated.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <string>
#include <vector>

#include "client/protocol/rank_stream.h"
#include "tests/server/server_test_support.h"
#include "tools/pack/tar_writer.h"

namespace shardcast::server_testing {
namespace {

constexpr int kWidth = 12000;
constexpr int kHeight = 14900;  // 178.8 M pixels: just under the decoder's pixel limit
constexpr int kImages = 64;

void AppendBigEndian32(uint32_t v, std::string* out) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<char>(v >> shift));
}

void AppendChunk(const char* type, const std::string& data, std::string* png) {
  AppendBigEndian32(static_cast<uint32_t>(data.size()), png);
  const std::string typed = std::string(type, 4) + data;
  png->append(typed);
  AppendBigEndian32(
      static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(typed.data()), typed.size())),
      png);
}

// A solid RGB PNG of width x height. Every row is the same ("Sub" filter: the colour,
// then zero differences), so one block of rows is compressed once, ended with a full
// flush (no reference to earlier data), and repeated: writing it costs milliseconds
// where deflating 536 MB would take the test's whole budget.
std::string SolidPng(int width, int height, uint8_t r, uint8_t g, uint8_t b) {
  constexpr int kRowsPerBlock = 100;  // divides kHeight
  EXPECT_EQ(height % kRowsPerBlock, 0);
  std::string row(1 + 3 * static_cast<size_t>(width), '\0');
  row[0] = 1;  // filter type Sub
  row[1] = static_cast<char>(r);
  row[2] = static_cast<char>(g);
  row[3] = static_cast<char>(b);
  std::string rows;
  for (int i = 0; i < kRowsPerBlock; ++i) rows += row;

  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 9, Z_DEFLATED, -15, 9, Z_DEFAULT_STRATEGY), Z_OK);  // raw deflate
  std::string block(deflateBound(&z, rows.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(rows.data());
  z.avail_in = static_cast<uInt>(rows.size());
  z.next_out = reinterpret_cast<Bytef*>(block.data());
  z.avail_out = static_cast<uInt>(block.size());
  EXPECT_EQ(deflate(&z, Z_FULL_FLUSH), Z_OK);
  block.resize(block.size() - z.avail_out);
  deflateEnd(&z);

  const uLong block_adler = adler32(1, reinterpret_cast<const Bytef*>(rows.data()), rows.size());
  uLong adler = adler32(0, nullptr, 0);
  std::string idat = "\x78\xda";  // zlib header: deflate, 32K window, best compression
  for (int i = 0; i < height / kRowsPerBlock; ++i) {
    idat += block;
    adler = adler32_combine(adler, block_adler, static_cast<z_off_t>(rows.size()));
  }
  idat += std::string("\x03\x00", 2);  // final, empty fixed-Huffman block
  AppendBigEndian32(static_cast<uint32_t>(adler), &idat);

  std::string png("\x89PNG\r\n\x1a\n", 8);
  std::string ihdr;
  AppendBigEndian32(static_cast<uint32_t>(width), &ihdr);
  AppendBigEndian32(static_cast<uint32_t>(height), &ihdr);
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // 8-bit RGB, no interlace
  AppendChunk("IHDR", ihdr, &png);
  AppendChunk("IDAT", idat, &png);
  AppendChunk("IEND", "", &png);
  return png;
}

// Bytes one such image needs to decode (DecodeBufferBytes for a PNG).
constexpr int64_t kImageDecodeBytes = int64_t{kWidth} * kHeight * 3 + int64_t{kHeight} * 8;

TEST(DecodeMemoryTest, SixtyFourHugePngsOnAllThreadsStayWithinTheBudget) {
  TempDir dir;
  // Two colours, so that a sample served with another's pixels would show.
  const std::string red = SolidPng(kWidth, kHeight, 200, 30, 60);
  const std::string blue = SolidPng(kWidth, kHeight, 20, 40, 220);
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
  const std::string png = SolidPng(kWidth, kHeight, 1, 2, 3);
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

}  // namespace
}  // namespace shardcast::server_testing
