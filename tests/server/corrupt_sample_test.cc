// A sample whose JPEG cannot be decoded at serve time: the server sends a
// deterministic substitute (mid-gray, label kept, flagged), counts and logs it,
// and the stream's batch count does not change.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "tests/server/server_test_support.h"

namespace shardcast::server_testing {
namespace {

// Overwrites the image member of (shard, index) with bytes that are no image.
void CorruptImage(const DatasetIndex& index, int shard, int sample) {
  const SampleEntry& entry = index.shards[shard].samples[sample];
  const MemberRef& member = entry.members[entry.image_member];
  const std::string path = index.root + "/" + index.shards[shard].path;
  const int fd = open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << path;
  const std::string garbage(member.size, 'x');
  ASSERT_EQ(pwrite(fd, garbage.data(), garbage.size(), static_cast<off_t>(member.offset)),
            static_cast<ssize_t>(garbage.size()));
  close(fd);
}

TEST(CorruptSampleTest, UndecodableImageIsSubstitutedCountedAndNChangesNot) {
  TempDir dir;
  MakeDataset(dir.path(), /*samples=*/200, /*per_shard=*/100);
  constexpr int kShard = 1, kSample = 37;
  std::string corrupt_key;
  {
    Reference before(dir.path());
    corrupt_key = before.index().shards[kShard].samples[kSample].key;
    CorruptImage(before.index(), kShard, kSample);
  }
  InProcessServer server(dir.path());
  Reference reference(dir.path());  // same index (the scan does not decode)
  ASSERT_EQ(reference.index().num_samples, 200);

  // Split sample, W = 1, B = 10: every sample is served exactly once per epoch.
  v1::RegisterResponse job;
  ASSERT_TRUE(Register(server.stub(), MakeRegister("corrupt", 0, 1, 10), &job).ok());
  ASSERT_EQ(job.batches_per_epoch(), 20);
  StreamResult result = StreamAll(server.stub(), "corrupt", 0, 0, 0);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  ASSERT_EQ(result.batches.size(), 20u);

  const auto planned = reference.Plan(job, 1, 0, 0);
  const TransformSpec spec = Reference::Spec(job);
  const size_t sample_bytes = 3ull * spec.crop * spec.crop;
  int substituted = 0;
  for (size_t b = 0; b < planned.size(); ++b) {
    const v1::Batch& batch = result.batches[b];
    int slot = -1;
    for (int i = 0; i < batch.samples_size(); ++i) {
      if (batch.samples(i).shard() == kShard && batch.samples(i).index_in_shard() == kSample) {
        slot = i;
      }
    }
    if (slot < 0) {
      reference.ExpectBatch(batch, planned[b], spec);
      continue;
    }
    ++substituted;
    const v1::SampleInfo& info = batch.samples(slot);
    EXPECT_TRUE(info.substituted());
    EXPECT_TRUE(info.valid());
    EXPECT_EQ(info.key(), corrupt_key);
    EXPECT_EQ(batch.labels(slot), reference.index().shards[kShard].samples[kSample].label);
    const std::string pixels = batch.images().substr(slot * sample_bytes, sample_bytes);
    EXPECT_EQ(pixels, std::string(sample_bytes, static_cast<char>(128)));
    // The other samples of that batch are intact.
    int failures = 0;
    const std::string expected = reference.Images(planned[b], spec, &failures);
    EXPECT_EQ(failures, 1);
    for (int i = 0; i < batch.samples_size(); ++i) {
      if (i == slot) continue;
      EXPECT_FALSE(batch.samples(i).substituted());
      EXPECT_TRUE(batch.images().compare(i * sample_bytes, sample_bytes, expected, i * sample_bytes,
                                         sample_bytes) == 0)
          << "slot " << i;
    }
  }
  EXPECT_EQ(substituted, 1);
  auto status = GetStatus(server.stub());
  EXPECT_EQ(status.decode_errors(), 1);
  EXPECT_EQ(status.substitutions(), 1);

  // Deterministic: the same epoch again carries the same substitute bytes.
  StreamResult again = StreamAll(server.stub(), "corrupt", 0, 0, 0);
  ASSERT_EQ(again.batches.size(), 20u);
  for (size_t b = 0; b < 20; ++b) {
    EXPECT_EQ(again.batches[b].SerializeAsString(), result.batches[b].SerializeAsString());
  }
  EXPECT_EQ(GetStatus(server.stub()).substitutions(), 2);
}

}  // namespace
}  // namespace shardcast::server_testing
