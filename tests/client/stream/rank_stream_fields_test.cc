// RankStream with fields (issue 37) against a real in-process server over tars written
// here: a members-only job on a text dataset (no image, no label) passes the client's
// checks with no shape and no pixels, and every valid sample carries its members'
// bytes as stored (header().samples(i).fields()), padding none; fields beside images
// come with the pixels. Each sample exactly once per epoch.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/stream/rank_stream.h"
#include "tests/server/server_test_support.h"
#include "tools/pack/image_encode.h"
#include "tools/pack/tar_writer.h"

namespace shardcast::server_testing {
namespace {

constexpr int kSamples = 23;  // no batch size used here divides it
constexpr int kBatch = 4;

// key -> ext -> bytes, as written.
using Written = std::map<std::string, std::map<std::string, std::string>>;

// Sample i's members: a caption (CJK, an emoji and a byte that is not UTF-8), metadata
// for even samples, and with `images` a JPEG and a label.
Written WriteShards(const std::string& dir, bool images) {
  pack::ShardWriterOptions options;
  options.out_dir = dir;
  options.per_shard = 10;
  pack::ShardWriter writer(options);
  Written written;
  for (int i = 0; i < kSamples; ++i) {
    const std::string key = absl::StrFormat("s%04d", i);
    std::map<std::string, std::string>& members = written[key];
    members["txt"] = absl::StrCat("caption ", i, " \xe7\x8c\xab \xf0\x9f\x90\x88 \xff");
    if (i % 2 == 0) members["json"] = absl::StrCat("{\"i\": ", i, "}");
    if (images) {
      std::vector<uint8_t> rgb(16 * 16 * 3, static_cast<uint8_t>(i * 9));
      absl::StatusOr<std::string> jpeg = pack::EncodeJpeg(rgb.data(), 16, 16);
      EXPECT_TRUE(jpeg.ok()) << jpeg.status();
      members["jpg"] = jpeg.value_or("");
      members["cls"] = absl::StrCat(i % 3);
    }
    const absl::Status added =
        writer.AddSample(key, std::vector<pack::SampleField>(members.begin(), members.end()));
    EXPECT_TRUE(added.ok()) << added;
  }
  const absl::Status closed = writer.Close();
  EXPECT_TRUE(closed.ok()) << closed;
  return written;
}

client::RankStreamOptions Options(const std::string& target, const std::string& job, bool image) {
  client::RankStreamOptions options;
  options.server = target;
  options.job = MakeRegister(job, /*rank=*/0, /*world=*/1, kBatch);
  options.job.set_remainder(v1::REMAINDER_PAD);
  options.job.add_fields("txt");
  options.job.add_fields("json?");
  if (!image) options.job.set_image(false);
  options.reconnect_deadline_seconds = 20;
  return options;
}

// One epoch of `stream`: checks each sample's fields against `written` and returns the
// keys of the valid samples.
std::multiset<std::string> Epoch(client::RankStream* stream, const Written& written, bool images) {
  EXPECT_TRUE(stream->StartEpoch(0).ok());
  std::multiset<std::string> keys;
  while (true) {
    absl::StatusOr<std::optional<client::ReceivedBatch>> next = stream->Next();
    EXPECT_TRUE(next.ok()) << next.status();
    if (!next.ok() || !next->has_value()) break;
    const v1::Batch& batch = (**next)->header();
    EXPECT_EQ((**next)->image_bytes(), images ? int64_t{kBatch} * 3 * 40 * 40 : 0);
    EXPECT_EQ(batch.shape_size(), images ? 4 : 0);
    for (const v1::SampleInfo& sample : batch.samples()) {
      if (!sample.valid()) {
        EXPECT_EQ(sample.fields_size(), 0);
        continue;
      }
      keys.insert(sample.key());
      const std::map<std::string, std::string>& members = written.at(sample.key());
      EXPECT_EQ(sample.fields_size(), 2);  // RankStream checked it
      if (sample.fields_size() != 2) continue;
      EXPECT_TRUE(sample.fields(0).present());
      EXPECT_EQ(sample.fields(0).ext(), "txt");
      EXPECT_EQ(sample.fields(0).data(), members.at("txt"));
      const auto json = members.find("json");
      EXPECT_EQ(sample.fields(1).present(), json != members.end()) << sample.key();
      EXPECT_EQ(sample.fields(1).data(), json != members.end() ? json->second : "");
    }
  }
  return keys;
}

std::multiset<std::string> Keys(const Written& written) {
  std::multiset<std::string> keys;
  for (const auto& [key, members] : written) keys.insert(key);
  return keys;
}

TEST(RankStreamFieldsTest, AMembersOnlyJobOnATextDatasetHasNoPixelsAndEveryMember) {
  TempDir dir;
  const Written written = WriteShards(dir.path(), /*images=*/false);
  InProcessServer server(dir.path());
  absl::StatusOr<std::unique_ptr<client::RankStream>> stream =
      client::RankStream::Connect(Options(server.target(), "text", /*image=*/false));
  ASSERT_TRUE(stream.ok()) << stream.status();
  const v1::RegisterResponse& registration = (*stream)->registration();
  EXPECT_FALSE(client::RegisteredWithImages(registration));
  EXPECT_EQ(registration.num_classes(), 0);
  EXPECT_EQ(registration.num_samples(), kSamples);
  EXPECT_EQ((*stream)->batches_per_epoch(), (kSamples + kBatch - 1) / kBatch);
  EXPECT_EQ(Epoch(stream->get(), written, /*images=*/false), Keys(written));
}

TEST(RankStreamFieldsTest, FieldsBesideImagesComeWithThePixels) {
  TempDir dir;
  const Written written = WriteShards(dir.path(), /*images=*/true);
  InProcessServer server(dir.path());
  absl::StatusOr<std::unique_ptr<client::RankStream>> stream =
      client::RankStream::Connect(Options(server.target(), "captioned", /*image=*/true));
  ASSERT_TRUE(stream.ok()) << stream.status();
  EXPECT_TRUE(client::RegisteredWithImages((*stream)->registration()));
  EXPECT_EQ((*stream)->registration().num_classes(), 3);
  EXPECT_EQ(Epoch(stream->get(), written, /*images=*/true), Keys(written));
}

TEST(RankStreamFieldsTest, AnImageJobOnATextDatasetIsRefusedSayingWhatToAskFor) {
  TempDir dir;
  WriteShards(dir.path(), /*images=*/false);
  InProcessServer server(dir.path());
  client::RankStreamOptions options = Options(server.target(), "text-image", /*image=*/true);
  absl::StatusOr<std::unique_ptr<client::RankStream>> stream = client::RankStream::Connect(options);
  ASSERT_FALSE(stream.ok());
  EXPECT_EQ(stream.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(stream.status().message(), ::testing::HasSubstr("no image in any sample"));
}

}  // namespace
}  // namespace shardcast::server_testing
