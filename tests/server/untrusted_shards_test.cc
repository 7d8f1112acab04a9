// Shards from many hands, through a real server and real gRPC streams: a 0-byte shard
// beside good ones is skipped and reported while the rest is served; a shard rewritten
// in place (same size, other images) under a running server ends the streams that
// would read it with FAILED_PRECONDITION naming it, never serving an image under the
// label of another.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <set>

#include "absl/strings/match.h"
#include "common/image/image_transform.h"
#include "tests/server/server_test_support.h"

namespace shardcast::server_testing {
namespace {

TEST(UntrustedShardsTest, ZeroByteShardIsSkippedReportedAndTheRestServed) {
  TempDir dir;
  MakeDataset(dir.path(), /*samples=*/60, /*per_shard=*/30);
  {
    std::ofstream empty(dir.path() + "/zzz.tar");  // sorts after the good shards
  }
  InProcessServer server(dir.path());
  Reference reference(dir.path());
  ASSERT_EQ(reference.index().skipped_shards.size(), 1u);

  const v1::GetStatusResponse status = GetStatus(server.stub());
  EXPECT_TRUE(status.serving());
  EXPECT_EQ(status.num_shards(), 2);
  EXPECT_EQ(status.num_samples(), 60);
  EXPECT_EQ(status.total_skipped_shards(), 1);
  ASSERT_EQ(status.skipped_shards_size(), 1);
  EXPECT_EQ(status.skipped_shards(0).path(), "zzz.tar");
  EXPECT_EQ(status.skipped_shards(0).reason(), "empty file (0 bytes)");
  EXPECT_EQ(status.total_changed_shards(), 0);

  // Every sample of the good shards, exactly once, byte for byte.
  v1::RegisterResponse job;
  ASSERT_TRUE(Register(server.stub(), MakeRegister("skip", 0, 1, 10), &job).ok());
  ASSERT_EQ(job.batches_per_epoch(), 6);
  StreamResult result = StreamAll(server.stub(), "skip", 0, 0, 0);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  const std::vector<PlannedBatch> planned = reference.Plan(job, 1, 0, 0);
  ASSERT_EQ(result.batches.size(), planned.size());
  std::set<std::string> keys;
  for (size_t b = 0; b < planned.size(); ++b) {
    reference.ExpectBatch(result.batches[b], planned[b], Reference::Spec(job));
    for (const v1::SampleInfo& info : result.batches[b].samples()) keys.insert(info.key());
  }
  EXPECT_EQ(keys.size(), 60u);
}

// In shard `shard` of `index`, two samples with other labels where the image of `from`
// fits in the image member of `to`.
bool FindSwap(const DatasetIndex& index, int shard, int* from, int* to) {
  const std::vector<SampleEntry>& samples = index.shards[shard].samples;
  for (size_t a = 0; a < samples.size(); ++a) {
    for (size_t b = 0; b < samples.size(); ++b) {
      const MemberRef& ma = samples[a].members[samples[a].image_member];
      const MemberRef& mb = samples[b].members[samples[b].image_member];
      if (samples[a].label != samples[b].label && ma.size <= mb.size) {
        *from = static_cast<int>(a);
        *to = static_cast<int>(b);
        return true;
      }
    }
  }
  return false;
}

TEST(UntrustedShardsTest, ShardRewrittenInPlaceWithTheSameSizeFailsItsStreams) {
  TempDir dir;
  MakeDataset(dir.path(), /*samples=*/60, /*per_shard=*/30);
  Reference reference(dir.path());  // read before the rewrite: the bytes indexed
  const DatasetIndex& index = reference.index();
  ASSERT_EQ(index.shards.size(), 2u);
  const std::string path = index.root + "/" + index.shards[1].path;
  // A past mtime, so that the rewrite below changes it whatever the filesystem's
  // timestamp tick (a real rewrite comes long after indexing).
  struct timespec past[2] = {{1600000000, 0}, {1600000000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), past, 0), 0);

  InProcessServer server(dir.path());
  v1::RegisterResponse job;
  ASSERT_TRUE(Register(server.stub(), MakeRegister("rewrite", 0, 1, 10), &job).ok());
  const TransformSpec spec = Reference::Spec(job);
  // Epoch 0 is served whole and right: descriptors are open, nothing is amiss.
  StreamResult before = StreamAll(server.stub(), "rewrite", 0, 0, 0);
  ASSERT_TRUE(before.status.ok()) << before.status.error_message();
  ASSERT_EQ(before.batches.size(), 6u);

  // The rewrite: same file, same size, but sample `to` now holds the image of `from`
  // (padded; a JPEG decoder ignores what follows its end) -- another picture under
  // `to`'s label, which decodes without error.
  int from = -1, to = -1;
  ASSERT_TRUE(FindSwap(index, 1, &from, &to));
  const MemberRef& from_image =
      index.shards[1].samples[from].members[index.shards[1].samples[from].image_member];
  const MemberRef& to_image =
      index.shards[1].samples[to].members[index.shards[1].samples[to].image_member];
  std::string shard_bytes = ReadWholeFile(path);
  std::string swapped = shard_bytes.substr(from_image.offset, from_image.size);
  swapped.resize(to_image.size, '\0');
  std::vector<uint8_t> pixels(3ull * spec.crop * spec.crop);
  ASSERT_TRUE(DecodeAndTransform(swapped, spec, 0, pixels.data()).ok());
  shard_bytes.replace(to_image.offset, to_image.size, swapped);
  {
    const int fd = ::open(path.c_str(), O_WRONLY);  // in place: same inode, no truncation
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, shard_bytes.data(), shard_bytes.size(), 0),
              static_cast<ssize_t>(shard_bytes.size()));
    ::close(fd);
  }

  // Epoch 1: whatever batches arrive are the indexed bytes; the stream ends with
  // FAILED_PRECONDITION naming the shard at the first batch that reads it.
  StreamResult after = StreamAll(server.stub(), "rewrite", 0, 1, 0);
  EXPECT_EQ(after.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << after.status.error_message();
  EXPECT_TRUE(absl::StrContains(after.status.error_message(), index.shards[1].path))
      << after.status.error_message();
  EXPECT_TRUE(absl::StrContains(after.status.error_message(), "changed since indexing"))
      << after.status.error_message();
  const std::vector<PlannedBatch> planned = reference.Plan(job, 1, 0, 1);
  ASSERT_LT(after.batches.size(), planned.size());
  for (size_t b = 0; b < after.batches.size(); ++b) {
    // Epoch 1 began after the rewrite: a batch that arrived holds no sample of shard 1,
    // and its pixels are those of the unchanged shard 0.
    for (const v1::SampleInfo& info : after.batches[b].samples()) EXPECT_NE(info.shard(), 1);
    reference.ExpectBatch(after.batches[b], planned[b], spec);
  }

  const v1::GetStatusResponse status = GetStatus(server.stub());
  EXPECT_EQ(status.total_changed_shards(), 1);
  ASSERT_EQ(status.changed_shards_size(), 1);
  EXPECT_EQ(status.changed_shards(0).path(), index.shards[1].path);
  EXPECT_TRUE(absl::StrContains(status.changed_shards(0).reason(), "mtime"))
      << status.changed_shards(0).reason();
  EXPECT_EQ(status.substitutions(), 0);  // refused, not substituted

  // A new job on the same server fails the same way: the shard stays refused.
  ASSERT_TRUE(Register(server.stub(), MakeRegister("later", 0, 1, 20), &job).ok());
  StreamResult later = StreamAll(server.stub(), "later", 0, 0, 0);
  EXPECT_EQ(later.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

}  // namespace
}  // namespace shardcast::server_testing
