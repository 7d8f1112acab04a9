// The run's rules shardcast-train and Python's Loader share: a new job id per run, and
// where a saved position resumes with the same or another world size and batch size.
#include "client/reconnect/run_rules.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace shardcast::client {
namespace {

using ::testing::MatchesRegex;

TEST(RunRulesTest, ANewJobIdPerRunNamesHostAndProcess) {
  const std::string a = NewRunJobId();
  EXPECT_THAT(a, MatchesRegex("run-.+-[0-9]+-[0-9a-f]{8}"));
  EXPECT_NE(a, NewRunJobId());  // 32 random bits apart
}

SavedPosition Saved(int64_t epoch, int64_t next, int64_t offset, int64_t world, int64_t batch) {
  SavedPosition saved;
  saved.epoch = epoch;
  saved.next_batch = next;
  saved.sample_offset = offset;
  saved.world_size = world;
  saved.batch_size = batch;
  return saved;
}

TEST(RunRulesTest, TheSameShapeResumesAtTheSameBatchAndOffset) {
  const ResumePosition at = ResumeAt(Saved(3, 7, 40, 2, 8), 2, 8, 1000);
  EXPECT_EQ(at.epoch, 3);
  EXPECT_EQ(at.batch, 7);
  EXPECT_EQ(at.sample_offset, 40);
  EXPECT_FALSE(at.elastic);
}

TEST(RunRulesTest, AnotherShapeGoesOnFromTheSamplesAllRanksConsumed) {
  const SavedPosition saved = Saved(3, 7, 40, 2, 8);
  EXPECT_EQ(saved.SamplesConsumed(), 40 + 7 * 2 * 8);
  const ResumePosition at = ResumeAt(saved, 4, 8, 1000);
  EXPECT_EQ(at.epoch, 3);
  EXPECT_EQ(at.batch, 0);
  EXPECT_EQ(at.sample_offset, 152);
  EXPECT_TRUE(at.elastic);
  // At most the epoch's samples (the last batches of a padded epoch count more).
  EXPECT_EQ(ResumeAt(saved, 4, 8, 100).sample_offset, 100);
  // Nothing consumed yet: the epoch's start, no offset.
  const ResumePosition start = ResumeAt(Saved(3, 0, 0, 2, 8), 3, 8, 1000);
  EXPECT_EQ(start.sample_offset, 0);
  EXPECT_FALSE(start.elastic);
  // No bound: the trainer, which lets the stream judge the offset.
  EXPECT_EQ(ResumeAt(saved, 2, 4, std::numeric_limits<int64_t>::max()).sample_offset, 152);
}

}  // namespace
}  // namespace shardcast::client
