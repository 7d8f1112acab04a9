// The checks of what a RankStream's caller asks: its settings, and the batches a
// StartEpoch asks for (from an elastic resume's sample offset too).
#include "client/checks/request_checks.h"

#include <gtest/gtest.h>

#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/plan/epoch_plan.h"
#include "common/plan/job_config.h"
#include "proto/job_config_proto.h"

namespace shardcast::client {
namespace {

namespace v1 = ::shardcast::v1;

TEST(CheckStreamSettingsTest, RefusesPrefetchBelowOneAndANegativeOrNanTimeout) {
  StreamSettings settings;
  EXPECT_TRUE(CheckStreamSettings(settings).ok());
  settings.prefetch = 0;
  EXPECT_EQ(CheckStreamSettings(settings),
            absl::InvalidArgumentError("prefetch must be >= 1, got 0"));
  settings.prefetch = 1;
  settings.stream_timeout_seconds = -1;
  EXPECT_EQ(CheckStreamSettings(settings).code(), absl::StatusCode::kInvalidArgument);
  settings.stream_timeout_seconds = std::nan("");
  EXPECT_EQ(CheckStreamSettings(settings).code(), absl::StatusCode::kInvalidArgument);
  settings.stream_timeout_seconds = 0;  // off
  EXPECT_TRUE(CheckStreamSettings(settings).ok());
}

TEST(CheckStreamSettingsTest, RefusesDecodeThreadsOutOfRangeAndNoDecodeMemory) {
  StreamSettings settings;
  for (int threads : {-1, kMaxDecodeThreads + 1, 1 << 30}) {
    settings.decode_threads = threads;
    const absl::Status status = CheckStreamSettings(settings);
    EXPECT_TRUE(absl::StrContains(
        status.message(), absl::StrCat("decode threads must be in [0, ", kMaxDecodeThreads, "]")))
        << threads << ": " << status;
  }
  settings.decode_threads = kMaxDecodeThreads;
  EXPECT_TRUE(CheckStreamSettings(settings).ok());
  settings.max_decode_memory_bytes = 0;
  EXPECT_EQ(CheckStreamSettings(settings).code(), absl::StatusCode::kInvalidArgument);
}

class EpochBatchesTest : public ::testing::Test {
 protected:
  EpochBatchesTest() {
    job_.set_job_id("j");
    job_.set_world_size(2);
    registration_.set_batches_per_epoch(10);
    registration_.set_num_samples(100);
  }
  // The registration's job config with `split`; the server's world size is 1, the
  // job's 2: the job's is what deals an offset.
  void SetSplit(Split split) {
    JobConfig config = DefaultJobConfig();
    config.plan.batch_size = 4;
    config.plan.split = split;
    SetResponseConfig(config, &registration_);
  }

  v1::RegisterRequest job_;
  v1::RegisterResponse registration_;
};

TEST_F(EpochBatchesTest, FromTheStartTheEpochHasBatchesPerEpoch) {
  EXPECT_EQ(EpochBatches(registration_, job_, 0, 0, 0).value(), 10);
  EXPECT_EQ(EpochBatches(registration_, job_, 3, 10, 0).value(), 10);  // nothing left
}

TEST_F(EpochBatchesTest, AStartOutsideTheEpochIsRefused) {
  const absl::Status past = EpochBatches(registration_, job_, 0, 11, 0).status();
  EXPECT_EQ(past.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(past.message(), "0 <= start_batch <= 10")) << past;
  EXPECT_TRUE(absl::StrContains(past.message(), "job 'j'")) << past;
  EXPECT_EQ(EpochBatches(registration_, job_, 0, -1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EpochBatches(registration_, job_, -1, 0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(EpochBatchesTest, AnOffsetDealsTheRestOverTheJobsWorldSize) {
  SetSplit(Split::kSample);
  PlanConfig plan = ResponseConfig(registration_)->plan;
  plan.world_size = 2;
  const int64_t left = BatchesFromOffset(100, plan, 20).value();
  EXPECT_EQ(EpochBatches(registration_, job_, 1, 0, 20).value(), left);
  EXPECT_EQ(EpochBatches(registration_, job_, 1, left + 1, 20).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(EpochBatchesTest, ThePlannersRefusalOfAnOffsetNamesJobAndEpoch) {
  SetSplit(Split::kShard);
  const absl::Status refused = EpochBatches(registration_, job_, 3, 0, 20).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StartsWith(refused.message(), "job 'j' epoch 3: ")) << refused;
}

}  // namespace
}  // namespace shardcast::client
