// Shards from many hands, served to a real client: member names and label text that
// are not UTF-8 arrive escaped one-to-one, a label far outside --max-classes is skipped
// instead of sizing anything, and image members over --max-member-bytes are
// substituted without being read.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "client/stream/rank_stream.h"
#include "common/util/utf8.h"
#include "tests/server/server_test_support.h"
#include "tools/pack/image_encode.h"

namespace shardcast::server_testing {
namespace {

// One ustar header + data block(s) for a regular file. Written by hand because every
// tar writer at hand (libarchive, GNU tar, Python's tarfile) converts names through the
// locale, and the point here is a name that is not UTF-8 byte for byte.
std::string UstarMember(const std::string& name, const std::string& data) {
  EXPECT_LE(name.size(), 100u);
  std::string header(512, '\0');
  const auto put = [&header](size_t at, const std::string& value) {
    std::copy(value.begin(), value.end(), header.begin() + static_cast<std::ptrdiff_t>(at));
  };
  put(0, name);
  put(100, "0000644");
  put(108, "0000000");
  put(116, "0000000");
  char size[12];
  std::snprintf(size, sizeof(size), "%011llo", static_cast<unsigned long long>(data.size()));
  put(124, size);
  put(136, "00000000000");
  put(148, "        ");  // the checksum counts its own field as spaces
  header[156] = '0';
  put(257, std::string("ustar\0"
                       "00",
                       8));
  unsigned sum = 0;
  for (unsigned char c : header) sum += c;
  char checksum[8];
  std::snprintf(checksum, sizeof(checksum), "%06o", sum);
  put(148, std::string(checksum, 6) + std::string("\0 ", 2));
  std::string member = header + data;
  member.resize((member.size() + 511) / 512 * 512, '\0');
  return member;
}

void WriteTar(const std::string& path,
              const std::vector<std::pair<std::string, std::string>>& files) {
  std::string tar;
  for (const auto& [name, data] : files) tar += UstarMember(name, data);
  tar += std::string(1024, '\0');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(tar.data(), static_cast<std::streamsize>(tar.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string SmallJpeg(uint8_t shade) {
  std::vector<uint8_t> rgb(48 * 48 * 3, shade);
  absl::StatusOr<std::string> jpeg = pack::EncodeJpeg(rgb.data(), 48, 48);
  EXPECT_TRUE(jpeg.ok()) << jpeg.status();
  return jpeg.ok() ? *jpeg : std::string();
}

client::RankStreamOptions StreamOptions(const std::string& target, const std::string& job,
                                        int batch) {
  client::RankStreamOptions options;
  options.server = target;
  options.job = MakeRegister(job, /*rank=*/0, /*world=*/1, batch);
  options.prefetch = 1;
  options.reconnect_initial_seconds = 0.05;
  // Before the escaping, the client could not parse such a batch and retried until
  // this deadline: keep a failing run short.
  options.reconnect_deadline_seconds = 5;
  return options;
}

// All keys of one epoch, as the client received them.
std::vector<std::string> ReceiveKeys(client::RankStream& stream, int64_t* substituted = nullptr) {
  std::vector<std::string> keys;
  EXPECT_TRUE(stream.StartEpoch(0, 0).ok());
  while (true) {
    absl::StatusOr<std::optional<client::ReceivedBatch>> next = stream.Next();
    EXPECT_TRUE(next.ok()) << next.status();
    if (!next.ok() || !next->has_value()) break;
    const v1::Batch& batch = (**next)->header();
    for (const v1::SampleInfo& info : batch.samples()) {
      keys.push_back(info.key());
      if (substituted != nullptr && info.substituted()) ++*substituted;
    }
  }
  return keys;
}

TEST(UntrustedDataTest, NonUtf8NamesAndClassTextAreEscapedOneToOne) {
  TempDir dir;
  const std::string latin1 = "caf\xe9";      // Latin-1 bytes: not UTF-8
  const std::string backslash = "caf\\xe9";  // ASCII with a real backslash
  const std::string utf8 = "caf\xc3\xa9";    // valid UTF-8: unchanged on the wire
  WriteTar(dir.path() + "/shard-0.tar",
           {{latin1 + ".jpg", SmallJpeg(40)},
            {latin1 + ".json", "{\"class\": \"" + latin1 + "\", \"label\": 0}"},
            {backslash + ".jpg", SmallJpeg(90)},
            {backslash + ".json", "{\"class\": \"back\\\\slash\", \"label\": 1}"},
            {utf8 + ".jpg", SmallJpeg(160)},
            {utf8 + ".json", "{\"class\": \"" + utf8 + "\", \"label\": 2}"}});
  InProcessServer server(dir.path());

  absl::StatusOr<std::unique_ptr<client::RankStream>> stream =
      client::RankStream::Connect(StreamOptions(server.target(), "utf8", /*batch=*/3));
  ASSERT_TRUE(stream.ok()) << stream.status();
  const v1::RegisterResponse& job = (*stream)->registration();
  ASSERT_EQ(job.class_names_size(), 3);
  EXPECT_EQ(job.class_names(0), "caf\\xe9");
  EXPECT_EQ(job.class_names(1), "back\\\\slash");
  EXPECT_EQ(job.class_names(2), utf8);

  std::vector<std::string> keys = ReceiveKeys(**stream);
  std::sort(keys.begin(), keys.end());
  // Two different byte strings, two different wire strings: the Latin-1 key is
  // "caf\xe9" (escape), the ASCII key "caf\\xe9" (its backslash doubled).
  EXPECT_EQ(keys, (std::vector<std::string>{"caf\\\\xe9", "caf\\xe9", utf8}));
  for (const std::string& key : keys) {
    EXPECT_TRUE(IsValidUtf8(key));
    absl::StatusOr<std::string> raw = UnescapeFromUtf8(key);
    ASSERT_TRUE(raw.ok()) << raw.status();
    EXPECT_TRUE(*raw == latin1 || *raw == backslash || *raw == utf8) << *raw;
  }
}

TEST(UntrustedDataTest, LabelFarOutsideMaxClassesIsSkippedNotSized) {
  TempDir dir;
  WriteTar(dir.path() + "/shard-0.tar", {{"a.jpg", SmallJpeg(10)},
                                         {"a.cls", "0"},
                                         {"b.jpg", SmallJpeg(20)},
                                         {"b.cls", "1"},
                                         {"huge.jpg", SmallJpeg(30)},
                                         {"huge.cls", "2147483646"},
                                         {"huge.json", "{\"class\": \"boom\"}"}});
  InProcessServer server(dir.path());

  v1::RegisterResponse job;
  ASSERT_TRUE(Register(server.stub(), MakeRegister("labels", 0, 1, 2), &job).ok());
  EXPECT_EQ(job.num_classes(), 2);
  EXPECT_EQ(job.num_samples(), 2);
  EXPECT_LE(job.class_names_size(), 2);
  const v1::GetStatusResponse status = GetStatus(server.stub());
  EXPECT_EQ(status.skipped_samples(), 1);
  EXPECT_EQ(status.num_classes(), 2);

  absl::StatusOr<const server::NamedDataset*> served =
      server.server().impl().datasets().Resolve("");
  ASSERT_TRUE(served.ok()) << served.status();
  const DatasetIndex& index = (*served)->data->index();
  ASSERT_EQ(index.skipped.size(), 1u);
  EXPECT_EQ(index.skipped[0].key, "huge");
  EXPECT_NE(index.skipped[0].reason.find("label 2147483646 in 'huge.cls' is outside [0, 1000000)"),
            std::string::npos)
      << index.skipped[0].reason;
}

TEST(UntrustedDataTest, ImageMembersOverMaxMemberBytesAreSubstitutedUnread) {
  TempDir dir;
  MakeDataset(dir.path(), /*samples=*/12, /*per_shard=*/6);
  server::ServerOptions options;
  options.max_member_bytes = 64;  // every synthetic JPEG is larger
  InProcessServer server(dir.path(), options);
  absl::StatusOr<std::unique_ptr<client::RankStream>> stream =
      client::RankStream::Connect(StreamOptions(server.target(), "members", /*batch=*/4));
  ASSERT_TRUE(stream.ok()) << stream.status();
  int64_t substituted = 0;
  const std::vector<std::string> keys = ReceiveKeys(**stream, &substituted);
  EXPECT_EQ(keys.size(), 12u);
  EXPECT_EQ(substituted, 12);
  const v1::GetStatusResponse status = GetStatus(server.stub());
  EXPECT_EQ(status.images_over_member_limit(), 12);
  EXPECT_EQ(status.substitutions(), 12);
  EXPECT_EQ(status.max_member_bytes(), 64);
}

// A real 1x1 GIF (the smallest file GIF89a allows) and a real 1x1 24-bit BMP.
const char kGif[] =
    "GIF89a\x01\x00\x01\x00\x80\x00\x00\xff\xff\xff\x00\x00\x00!\xf9\x04\x01\x00"
    "\x00\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;";
std::string OnePixelBmp() {
  std::string bmp = "BM";
  const auto le = [&bmp](uint32_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) bmp.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  le(58, 4), le(0, 4), le(54, 4);                      // file size, reserved, pixel offset
  le(40, 4), le(1, 4), le(1, 4), le(1, 2), le(24, 2);  // BITMAPINFOHEADER, 1x1, 24 bits
  le(0, 4), le(4, 4), le(2835, 4), le(2835, 4), le(0, 4), le(0, 4);
  bmp += std::string("\x10\x20\x30\x00", 4);  // one BGR pixel, the row padded to 4
  return bmp;
}

// Formats PIL opens and shardcast does not decode are substituted, as corrupt files
// are, and counted apart: images_unsupported_format, beside decode_errors.
TEST(UntrustedDataTest, ImagesOfAnUnsupportedFormatAreSubstitutedAndCountedApart) {
  TempDir dir;
  WriteTar(dir.path() + "/mixed-000000.tar",
           {{"a.jpg", SmallJpeg(10)},
            {"a.cls", "0"},
            {"b.png", std::string(kGif, sizeof(kGif) - 1)},  // named .png: the content decides
            {"b.cls", "0"},
            {"c.jpg", OnePixelBmp()},
            {"c.cls", "0"},
            {"d.jpg", std::string(300, 'x')},  // no format at all: a plain decode error
            {"d.cls", "0"}});
  InProcessServer server(dir.path(), server::ServerOptions{});
  absl::StatusOr<std::unique_ptr<client::RankStream>> stream =
      client::RankStream::Connect(StreamOptions(server.target(), "formats", /*batch=*/4));
  ASSERT_TRUE(stream.ok()) << stream.status();
  int64_t substituted = 0;
  EXPECT_EQ(ReceiveKeys(**stream, &substituted).size(), 4u);
  EXPECT_EQ(substituted, 3);
  const v1::GetStatusResponse status = GetStatus(server.stub());
  EXPECT_EQ(status.images_unsupported_format(), 2);
  EXPECT_EQ(status.decode_errors(), 3);
  EXPECT_EQ(status.substitutions(), 3);
}

}  // namespace
}  // namespace shardcast::server_testing
