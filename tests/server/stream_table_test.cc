// The stream table's rules on real jobs and a clock the test moves: one newest stream
// per (job, rank), a replaced stream open until it closes but no longer moving its
// rank, and what the periodic rounds and the jobs' expiry read from it.
#include "server/serving/stream_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "server/serving/job_registry.h"
#include "tests/server/fake_clock.h"

namespace shardcast::server_testing {
namespace {

using server::Job;
using server::RankProgress;
using server::StreamControl;
using server::StreamTable;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

// A job of two ranks; the table never reads its dataset.
std::unique_ptr<Job> MakeJob(const std::string& id, const FakeClock& clock) {
  JobConfig config;
  config.plan.world_size = 2;
  auto job = std::make_unique<Job>(id, config, /*batches_per_epoch=*/10, "fingerprint",
                                   /*dataset=*/nullptr,
                                   /*samples=*/nullptr, "peer", &clock);
  job->MarkRegistered(0);
  job->MarkRegistered(1);
  return job;
}

std::shared_ptr<StreamControl> Control(const std::string& description) {
  return std::make_shared<StreamControl>(description);
}

RankProgress ProgressOf(const Job& job, int32_t rank) {
  for (const RankProgress& progress : job.Progress()) {
    if (progress.rank == rank) return progress;
  }
  ADD_FAILURE() << "rank " << rank << " not registered";
  return {};
}

TEST(StreamTableTest, ANewerStreamOfTheSameRankReplacesTheOlderOne) {
  FakeClock clock;
  std::unique_ptr<Job> job = MakeJob("job", clock);
  StreamTable table;
  const std::shared_ptr<StreamControl> first = Control("first");
  const std::shared_ptr<StreamControl> second = Control("second");

  const StreamTable::Opened a = table.Open(job.get(), 0, 0, 0, {}, first);
  EXPECT_EQ(a.replaced.control, nullptr);
  const StreamTable::Opened b = table.Open(job.get(), 0, 0, 4, {}, second);
  EXPECT_EQ(b.replaced.control, first);
  EXPECT_NE(a.stream_id, b.stream_id);

  // The replaced stream stays open until its call closes it, but only the newest is
  // the rank's: the one a reconnect replaces and the one the idle reaper looks at.
  EXPECT_EQ(table.size(), 2);
  EXPECT_EQ(table.NewestOf(job.get(), 0).control, second);
  EXPECT_THAT(table.NewestControls(), ElementsAre(second));
}

TEST(StreamTableTest, RanksAndJobsHaveStreamsOfTheirOwn) {
  FakeClock clock;
  std::unique_ptr<Job> job = MakeJob("job", clock);
  std::unique_ptr<Job> other = MakeJob("other", clock);
  StreamTable table;
  const std::shared_ptr<StreamControl> rank0 = Control("rank 0");
  const std::shared_ptr<StreamControl> rank1 = Control("rank 1");

  EXPECT_EQ(table.Open(job.get(), 0, 0, 0, {}, rank0).replaced.control, nullptr);
  EXPECT_EQ(table.Open(job.get(), 1, 0, 0, {}, rank1).replaced.control, nullptr);
  EXPECT_EQ(table.NewestOf(job.get(), 0).control, rank0);
  EXPECT_EQ(table.NewestOf(job.get(), 1).control, rank1);
  EXPECT_EQ(table.NewestOf(other.get(), 0).control, nullptr);
  EXPECT_TRUE(table.AnyOpen(job.get()));
  EXPECT_FALSE(table.AnyOpen(other.get()));
}

TEST(StreamTableTest, AReplacedStreamsBatchesCountButDoNotMoveItsRank) {
  FakeClock clock;
  std::unique_ptr<Job> job = MakeJob("job", clock);
  StreamTable table;
  const int64_t old_stream = table.Open(job.get(), 0, 0, 0, {}, Control("old")).stream_id;
  const int64_t new_stream = table.Open(job.get(), 0, 1, 5, {}, Control("new")).stream_id;
  EXPECT_EQ(ProgressOf(*job, 0).epoch, 1);
  EXPECT_EQ(ProgressOf(*job, 0).next_batch, 5);

  table.Sent(job.get(), 0, old_stream, /*batch_index=*/2, clock.Now());
  EXPECT_EQ(ProgressOf(*job, 0).next_batch, 5);
  EXPECT_EQ(ProgressOf(*job, 0).batches_sent, 1);

  clock.Advance(absl::Seconds(3));
  table.Sent(job.get(), 0, new_stream, /*batch_index=*/5, clock.Now());
  EXPECT_EQ(ProgressOf(*job, 0).next_batch, 6);
  EXPECT_EQ(ProgressOf(*job, 0).batches_sent, 2);
  EXPECT_EQ(ProgressOf(*job, 0).last_batch, clock.Now());
}

TEST(StreamTableTest, ABatchOfTheNewestStreamLowersTheRanksStallFlagOnce) {
  FakeClock clock;
  std::unique_ptr<Job> job = MakeJob("job", clock);
  StreamTable table;
  const int64_t stream = table.Open(job.get(), 0, 0, 0, {}, Control("rank 0")).stream_id;
  const int64_t ahead = table.Open(job.get(), 1, 0, 0, {}, Control("rank 1")).stream_id;
  // Rank 1 moves ahead while rank 0 takes nothing for a minute: rank 0 is stalled.
  table.Sent(job.get(), 1, ahead, 0, clock.Now());
  clock.Advance(absl::Minutes(1));
  table.Sent(job.get(), 1, ahead, 1, clock.Now());
  ASSERT_EQ(job->UpdateStalls(absl::Seconds(30), clock.Now()).size(), 1);

  EXPECT_TRUE(table.Sent(job.get(), 0, stream, 0, clock.Now()));
  EXPECT_FALSE(table.Sent(job.get(), 0, stream, 1, clock.Now()));
}

TEST(StreamTableTest, ClosingLeavesTheNewestStreamAndThenNone) {
  FakeClock clock;
  std::unique_ptr<Job> job = MakeJob("job", clock);
  StreamTable table;
  const int64_t old_stream = table.Open(job.get(), 0, 0, 0, {}, Control("old")).stream_id;
  const std::shared_ptr<StreamControl> newest = Control("new");
  const int64_t new_stream = table.Open(job.get(), 0, 0, 0, {}, newest).stream_id;
  EXPECT_FALSE(table.AwaitNone(absl::InfinitePast()));

  table.Close(job.get(), 0, old_stream);
  EXPECT_EQ(table.NewestOf(job.get(), 0).control, newest);
  EXPECT_TRUE(table.AnyOpen(job.get()));

  // The job's activity counts from the last close (its TTL starts there).
  clock.Advance(absl::Hours(1));
  table.Close(job.get(), 0, new_stream);
  EXPECT_EQ(table.NewestOf(job.get(), 0).control, nullptr);
  EXPECT_THAT(table.NewestControls(), IsEmpty());
  EXPECT_EQ(table.size(), 0);
  EXPECT_FALSE(table.AnyOpen(job.get()));
  EXPECT_TRUE(table.AwaitNone(absl::InfinitePast()));
  EXPECT_FALSE(job->QuietFor(absl::Minutes(1), clock.Now()));
  EXPECT_TRUE(job->QuietFor(absl::Minutes(1), clock.Now() + absl::Minutes(1)));
}

}  // namespace
}  // namespace shardcast::server_testing
