// Where a mixed run resumes another (mix_resume.h), against hand-computed cases: the same
// cases python/shardcast/mix_resume.py's resumed_from and next_segment give.
#include "client/reconnect/mix_resume.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace shardcast::client {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kS = 96;  // samples per epoch

std::vector<int64_t> Flat(const std::vector<MixtureSegment>& segments) {
  std::vector<int64_t> out;
  for (const MixtureSegment& s : segments) {
    out.insert(out.end(), {s.start_position, s.start_step, s.global_batch});
  }
  return out;
}

const std::vector<MixturePoint> kSchedule = {{0, {{"a", 0.5}, {"b", 0.5}}},
                                             {6, {{"a", 0.2}, {"b", 0.8}}}};

// A checkpoint of epoch `epoch`, `next` batches done by 2 ranks of 4, of job "fp-old".
SavedMix Saved(int64_t epoch, int64_t next, std::vector<MixtureSegment> segments) {
  SavedMix saved;
  saved.position.epoch = epoch;
  saved.position.next_batch = next;
  saved.position.world_size = 2;
  saved.position.batch_size = 4;
  saved.batches_in_epoch = 12;
  saved.job_fingerprint = "fp-old";
  saved.run.segments = std::move(segments);
  saved.run.schedule = kSchedule;
  saved.run.data_fingerprint = "data";
  saved.run.samples_per_epoch = kS;
  return saved;
}

MixJob Job(const std::string& fingerprint, int64_t global_batch) {
  return MixJob{fingerprint, "data", kS, global_batch, kSchedule};
}

TEST(MixResumeTest, TheNextSegmentStartsAtTheStepAfterTheEarlierRunsLast) {
  // 40 positions at 8 a step: steps 0..4; the next run starts at step 5.
  EXPECT_EQ(Flat({NextMixSegment({{0, 0, 8}}, 40, 12)}), (std::vector<int64_t>{40, 5, 12}));
  // A step begun is a step taken: position 41 is in step 5, so the next is 6.
  EXPECT_EQ(Flat({NextMixSegment({{0, 0, 8}}, 41, 4)}), (std::vector<int64_t>{41, 6, 4}));
  // The last segment before the position counts, not one that starts at or after it.
  EXPECT_EQ(Flat({NextMixSegment({{0, 0, 8}, {40, 5, 12}, {100, 9, 2}}, 100, 4)}),
            (std::vector<int64_t>{100, 10, 4}));
}

TEST(MixResumeTest, TheSameRunGoesOnOrdinarily) {
  absl::StatusOr<std::optional<MixResumeAt>> at =
      MixResumedFrom(Saved(0, 5, {{0, 0, 8}}), Job("fp-old", 8));
  ASSERT_TRUE(at.ok()) << at.status();
  EXPECT_FALSE(at->has_value());
  // So does a checkpoint from before runs kept their segments, at the same global batch.
  at = MixResumedFrom(Saved(0, 5, {}), Job("fp-old", 8));
  ASSERT_TRUE(at.ok()) << at.status();
  EXPECT_FALSE(at->has_value());
  // And anything when this job is no mixture.
  MixJob plain = Job("fp-old", 4);
  plain.schedule.clear();
  at = MixResumedFrom(Saved(0, 5, {{0, 0, 8}}), plain);
  ASSERT_TRUE(at.ok()) << at.status();
  EXPECT_FALSE(at->has_value());
}

TEST(MixResumeTest, AnotherGlobalBatchSendsTheSegmentsAndNoSchedule) {
  // 5 steps of 2 x 4: position 40; resumed at 3 x 4.
  absl::StatusOr<std::optional<MixResumeAt>> at =
      MixResumedFrom(Saved(0, 5, {{0, 0, 8}}), Job("fp-old", 12));
  ASSERT_TRUE(at.ok()) << at.status();
  ASSERT_TRUE(at->has_value());
  const MixResumeAt& r = **at;
  EXPECT_EQ(r.epoch, 0);
  EXPECT_EQ(r.sample_offset, 40);
  EXPECT_EQ(r.resume.position, 40);
  EXPECT_EQ(Flat(r.resume.segments), (std::vector<int64_t>{0, 0, 8}));
  EXPECT_TRUE(r.resume.schedule.empty());
  EXPECT_EQ(Flat(r.segments), (std::vector<int64_t>{0, 0, 8, 40, 5, 12}));
}

TEST(MixResumeTest, AResumeOfAResumeKeepsEverySegmentBeforeThePosition) {
  // Run 2 (3 x 4 from position 40, step 5) checkpointed in epoch 1 after 3 batches at
  // offset 0: position 96 + 36 = 132; its segments go on to a run of 1 x 4.
  SavedMix saved = Saved(1, 3, {{0, 0, 8}, {40, 5, 12}});
  saved.position.world_size = 3;
  saved.batches_in_epoch = 8;
  absl::StatusOr<std::optional<MixResumeAt>> at = MixResumedFrom(saved, Job("fp-old", 4));
  ASSERT_TRUE(at.ok()) << at.status();
  ASSERT_TRUE(at->has_value());
  EXPECT_EQ((*at)->epoch, 1);
  EXPECT_EQ((*at)->sample_offset, 36);
  EXPECT_EQ((*at)->resume.position, 132);
  EXPECT_EQ(Flat((*at)->resume.segments), (std::vector<int64_t>{0, 0, 8, 40, 5, 12}));
  // (132 - 1 - 40) // 12 + 5 + 1 = 13.
  EXPECT_EQ(Flat((*at)->segments), (std::vector<int64_t>{0, 0, 8, 40, 5, 12, 132, 13, 4}));
  // The same global batch as run 2's, still a resume: the sequence is not one segment.
  at = MixResumedFrom(saved, Job("fp-old", 12));
  ASSERT_TRUE(at.ok()) << at.status();
  ASSERT_TRUE(at->has_value());
  EXPECT_EQ(Flat((*at)->segments), (std::vector<int64_t>{0, 0, 8, 40, 5, 12, 132, 13, 12}));
}

TEST(MixResumeTest, NewWeightsSendTheEarlierSchedule) {
  absl::StatusOr<std::optional<MixResumeAt>> at =
      MixResumedFrom(Saved(0, 6, {{0, 0, 8}}), Job("fp-new", 8));
  ASSERT_TRUE(at.ok()) << at.status();
  ASSERT_TRUE(at->has_value());
  EXPECT_EQ((*at)->resume.position, 48);
  ASSERT_EQ((*at)->resume.schedule.size(), 2u);
  EXPECT_EQ((*at)->resume.schedule[1].step, 6);
  EXPECT_EQ((*at)->resume.schedule[1].weights, kSchedule[1].weights);
  EXPECT_EQ(Flat((*at)->segments), (std::vector<int64_t>{0, 0, 8, 48, 6, 8}));
}

const std::vector<MixturePoint> kOther = {{0, {{"a", 0.9}, {"b", 0.1}}}};
const std::vector<MixturePoint> kThird = {{0, {{"a", 0.3}, {"b", 0.7}}}};

TEST(MixResumeTest, EverySegmentSendsAndKeepsItsOwnSchedule) {
  // Run 2 resumed run 1 (kSchedule, 2 x 4) at 40 under kOther (3 x 4); checkpointed at
  // 132; run 3 goes on under kThird at 1 x 4.
  SavedMix saved = Saved(1, 3, {{0, 0, 8}, {40, 5, 12}});
  saved.position.world_size = 3;
  saved.batches_in_epoch = 8;
  saved.run.schedule = kOther;
  saved.run.segment_schedules = {kSchedule, kOther};
  MixJob job = Job("fp-third", 4);
  job.schedule = kThird;
  absl::StatusOr<std::optional<MixResumeAt>> at = MixResumedFrom(saved, job);
  ASSERT_TRUE(at.ok()) << at.status();
  ASSERT_TRUE(at->has_value());
  const MixResumeAt& r = **at;
  ASSERT_EQ(r.resume.segment_schedules.size(), 2u);
  EXPECT_EQ(r.resume.segment_schedules[0][1].weights, kSchedule[1].weights);
  EXPECT_EQ(r.resume.segment_schedules[1][0].weights, kOther[0].weights);
  // The single schedule older servers read: the checkpoint's run's.
  ASSERT_EQ(r.resume.schedule.size(), 1u);
  EXPECT_EQ(r.resume.schedule[0].weights, kOther[0].weights);
  // This run's: the three segments and their three schedules.
  EXPECT_EQ(Flat(r.segments), (std::vector<int64_t>{0, 0, 8, 40, 5, 12, 132, 13, 4}));
  ASSERT_EQ(r.segment_schedules.size(), 3u);
  EXPECT_EQ(r.segment_schedules[0].size(), 2u);
  EXPECT_EQ(r.segment_schedules[1][0].weights, kOther[0].weights);
  EXPECT_EQ(r.segment_schedules[2][0].weights, kThird[0].weights);
}

TEST(MixResumeTest, ACheckpointWithoutSegmentSchedulesMeansItsScheduleForEvery) {
  SavedMix saved = Saved(1, 3, {{0, 0, 8}, {40, 5, 12}});
  saved.position.world_size = 3;
  saved.batches_in_epoch = 8;
  absl::StatusOr<std::optional<MixResumeAt>> at = MixResumedFrom(saved, Job("fp-new", 4));
  ASSERT_TRUE(at.ok()) << at.status();
  ASSERT_TRUE(at->has_value());
  ASSERT_EQ((*at)->resume.segment_schedules.size(), 2u);
  for (const std::vector<MixturePoint>& schedule : (*at)->resume.segment_schedules) {
    ASSERT_EQ(schedule.size(), 2u);
    EXPECT_EQ(schedule[1].weights, kSchedule[1].weights);
  }
  // Without the run's facts at all (this job's checkpoint): this job's schedule.
  MixJob job = Job("fp-old", 12);
  job.schedule = kOther;
  SavedMix bare = Saved(0, 5, {});
  bare.run = MixRun{};  // what such a checkpoint reads back as
  at = MixResumedFrom(bare, job);
  ASSERT_TRUE(at.ok()) << at.status();
  ASSERT_TRUE(at->has_value());
  ASSERT_EQ((*at)->resume.segment_schedules.size(), 1u);
  EXPECT_EQ((*at)->resume.segment_schedules[0][0].weights, kOther[0].weights);
}

TEST(MixResumeTest, AFinishedEpochResumesAtTheNextEpochsStart) {
  // Remainder drop: 12 batches of 8 served 96 positions; with S = 100 the epoch's last 4
  // were drawn and served to no rank, and the next epoch starts at 100.
  SavedMix saved = Saved(0, 12, {{0, 0, 8}});
  MixJob job = Job("fp-old", 4);
  job.samples_per_epoch = 100;
  absl::StatusOr<std::optional<MixResumeAt>> at = MixResumedFrom(saved, job);
  ASSERT_TRUE(at.ok()) << at.status();
  ASSERT_TRUE(at->has_value());
  EXPECT_EQ((*at)->epoch, 1);
  EXPECT_EQ((*at)->sample_offset, 0);
  EXPECT_EQ((*at)->resume.position, 100);
  EXPECT_EQ(Flat((*at)->segments), (std::vector<int64_t>{0, 0, 8, 100, 13, 4}));
}

TEST(MixResumeTest, NothingDrawnYetStartsTheSequence) {
  absl::StatusOr<std::optional<MixResumeAt>> at =
      MixResumedFrom(Saved(0, 0, {{0, 0, 8}}), Job("fp-new", 4));
  ASSERT_TRUE(at.ok()) << at.status();
  ASSERT_TRUE(at->has_value());
  EXPECT_EQ((*at)->resume.position, 0);
  EXPECT_EQ(Flat((*at)->segments), (std::vector<int64_t>{0, 0, 4}));
}

TEST(MixResumeTest, OtherDataIsRefusedNamingBothFingerprints) {
  MixJob job = Job("fp-new", 8);
  job.data_fingerprint = "other-data";
  absl::StatusOr<std::optional<MixResumeAt>> at = MixResumedFrom(Saved(0, 6, {{0, 0, 8}}), job);
  EXPECT_EQ(at.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(at.status().message(), HasSubstr("mix_data_fingerprint 'data', this job's "
                                               "'other-data'"));
  // A checkpoint without the run's facts under other weights: not this mixture's to
  // judge (the ordinary resume refuses the other job fingerprint).
  at = MixResumedFrom(Saved(0, 6, {}), job);
  ASSERT_TRUE(at.ok()) << at.status();
  EXPECT_FALSE(at->has_value());
}

// Segments and positions come from a checkpoint file: hostile ones are refused before
// any arithmetic divides by a global batch, never a crash.
TEST(MixResumeTest, HostileSegmentsAndPositionsAreRefused) {
  const std::vector<std::vector<MixtureSegment>> hostile = {
      {{0, 0, 0}},                            // a global batch of 0
      {{0, 0, -8}},                           // negative
      {{5, 0, 8}},                            // not from position 0
      {{0, 0, 8}, {0, 1, 8}},                 // positions not increasing
      {{0, 0, 8}, {40, 2, 8}},                // a step that does not follow
      {{0, 0, int64_t{1} << 41}},             // a global batch past 2^40
      {{0, 0, 8}, {int64_t{1} << 62, 9, 8}},  // past the planner's positions
  };
  for (const std::vector<MixtureSegment>& segments : hostile) {
    absl::StatusOr<std::optional<MixResumeAt>> at =
        MixResumedFrom(Saved(0, 6, segments), Job("fp-new", 8));
    EXPECT_EQ(at.status().code(), absl::StatusCode::kFailedPrecondition) << Flat(segments)[2];
    EXPECT_THAT(at.status().message(), HasSubstr("the checkpoint's mixture segments"));
  }
  SavedMix negative = Saved(-3, 6, {{0, 0, 8}});
  absl::StatusOr<std::optional<MixResumeAt>> at = MixResumedFrom(negative, Job("fp-new", 8));
  EXPECT_EQ(at.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(at.status().message(), HasSubstr("negative"));
}

}  // namespace
}  // namespace shardcast::client
