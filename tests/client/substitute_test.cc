// A sample the server could not decode arrives as a mid-grey substitute flagged
// `substituted`; BatchStream does not let it train with its real label (issue 29): masked
// like padding (label -1, counted) by default, or the stream fails naming the sample.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "client/batch_stream.h"
#include "common/shards/dataset_index.h"
#include "tests/support/child_process.h"
#include "tests/support/server_process.h"
#include "tests/support/temp_dir.h"

namespace shardcast {
namespace {

using ::testing::HasSubstr;
using testing_util::MakeSyntheticShards;
using testing_util::ServerProcess;
using testing_util::TempDir;

// Overwrites the image of sample `sample` of the first shard with bytes no decoder
// takes; returns its key.
std::string CorruptImage(const std::string& shards, int sample) {
  absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(shards, IndexOptions());
  EXPECT_TRUE(index.ok()) << index.status();
  const SampleEntry& entry = index->shards[0].samples[sample];
  const MemberRef& image = entry.members[entry.image_member];
  const std::string path = index->root + "/" + index->shards[0].path;
  const int fd = ::open(path.c_str(), O_WRONLY);
  EXPECT_GE(fd, 0);
  const std::string garbage(image.size, 'x');
  EXPECT_EQ(::pwrite(fd, garbage.data(), garbage.size(), static_cast<off_t>(image.offset)),
            static_cast<ssize_t>(garbage.size()));
  ::close(fd);
  return entry.key;
}

BatchStreamOptions Options(const std::string& server, const std::string& job) {
  BatchStreamOptions options;
  options.server = server;
  options.job.job_id = job;
  options.job.overrides.batch_size = 8;
  options.job.overrides.split = Split::kSample;
  options.job.overrides.transform_mode = TransformMode::kCenter;
  options.job.overrides.resize = 28;
  options.job.overrides.crop = 24;
  options.reconnect_deadline_seconds = 20;
  return options;
}

// 40 samples, the image of one overwritten, served by a server of the test's own.
class SubstituteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string shards = dir_.path() + "/shards";
    ASSERT_TRUE(MakeSyntheticShards(shards, /*samples=*/40, /*classes=*/5, 32, 20).ok());
    corrupt_key_ = CorruptImage(shards, 7);
    server_ = std::make_unique<ServerProcess>(shards, dir_.path());
    ASSERT_TRUE(server_->Start().ok());
  }

  TempDir dir_;
  std::string corrupt_key_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(SubstituteTest, ASubstitutedSampleIsMaskedOrFailsTheStream) {
  ServerProcess& server = *server_;
  const std::string& corrupt_key = corrupt_key_;

  // Masked (the default): the substitute's label is -1, the rest keep theirs.
  absl::StatusOr<std::unique_ptr<BatchStream>> masked =
      BatchStream::Connect(Options(server.address(), "mask"));
  ASSERT_TRUE(masked.ok()) << masked.status();
  ASSERT_TRUE((*masked)->StartEpoch(0).ok());
  int64_t substituted = 0, labelled = 0;
  while (true) {
    absl::StatusOr<std::optional<TrainingBatch>> next = (*masked)->Next();
    ASSERT_TRUE(next.ok()) << next.status();
    if (!next->has_value()) break;
    const TrainingBatch& batch = **next;
    substituted += batch.substituted;
    for (size_t i = 0; i < batch.samples.size(); ++i) {
      const int64_t label = batch.labels[static_cast<int64_t>(i)].item<int64_t>();
      if (batch.samples[i].substituted) {
        EXPECT_EQ(batch.samples[i].key, corrupt_key);
        EXPECT_EQ(label, -1);
      } else {
        EXPECT_GE(label, 0);
        ++labelled;
      }
    }
  }
  EXPECT_EQ(substituted, 1);
  EXPECT_EQ(labelled, 39);

  // --on-substitute fail: the batch with the substitute fails the stream, naming it.
  BatchStreamOptions options = Options(server.address(), "fail");
  options.on_substitute = OnSubstitute::kFail;
  absl::StatusOr<std::unique_ptr<BatchStream>> failing = BatchStream::Connect(options);
  ASSERT_TRUE(failing.ok()) << failing.status();
  ASSERT_TRUE((*failing)->StartEpoch(0).ok());
  absl::Status error;
  for (int i = 0; i < 10 && error.ok(); ++i) {
    absl::StatusOr<std::optional<TrainingBatch>> next = (*failing)->Next();
    if (!next.ok())
      error = next.status();
    else
      ASSERT_TRUE(next->has_value()) << "the epoch ended without the substitute";
  }
  EXPECT_EQ(error.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(error.message(), HasSubstr("sample '" + corrupt_key + "'"));
  EXPECT_THAT(error.message(), HasSubstr("--on-substitute fail"));
}

// shardcast-train: the substitute is counted in the epoch line and the metrics file and
// left out of the loss; --on-substitute fail stops the run naming the sample.
TEST_F(SubstituteTest, TheTrainerMasksAndCountsASubstituteOrFailsOnIt) {
  ServerProcess& server = *server_;
  const std::string& corrupt_key = corrupt_key_;
  const TempDir& dir = dir_;
  const auto train = [&](const std::string& job, const std::string& policy) {
    return testing_util::RunShellCapture(
        testing_util::ShellCommand({testing_util::BinaryPath("client/shardcast-train"),
                                    "--server",
                                    server.address(),
                                    "--job-id",
                                    job,
                                    "--arch",
                                    "small-cnn",
                                    "-b",
                                    "8",
                                    "--split",
                                    "sample",
                                    "--resize",
                                    "28",
                                    "--crop",
                                    "24",
                                    "--epochs",
                                    "1",
                                    "--no-progress",
                                    "--on-substitute",
                                    policy,
                                    "--metrics",
                                    dir.path() + "/" + job + ".jsonl"}) +
        " 2>&1");
  };
  const testing_util::CommandOutput masked = train("mask", "mask");
  ASSERT_EQ(masked.exit_code, 0) << masked.out;
  EXPECT_THAT(masked.out, HasSubstr("1 undecodable sample left out"));
  const std::string metrics = testing_util::ReadWholeFile(dir.path() + "/mask.jsonl.rank0");
  EXPECT_THAT(metrics, HasSubstr("\"substituted_all_ranks\":1"));

  const testing_util::CommandOutput failed = train("fail", "fail");
  EXPECT_NE(failed.exit_code, 0) << failed.out;
  EXPECT_THAT(failed.out, HasSubstr("sample '" + corrupt_key + "'"));
}

}  // namespace
}  // namespace shardcast
