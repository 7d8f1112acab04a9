// A mixed job's resumes across runs (mixture_epoch.h, MixtureJobPlan::Resumed): resumes
// chain. Run A draws [0, p1) under schedule SA, run B resumes it with SB and draws
// [p1, p2), run C resumes B: C's replayed state must be the one A then B reached, each
// segment under its own run's schedule, so every dataset's pass goes on where it was.
#include "common/plan/mixture_epoch.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shardcast {
namespace {

const std::vector<MixtureDataset> kDatasets = {{"a", 37}, {"b", 23}, {"c", 11}};
constexpr uint64_t kEpoch = 50;
constexpr uint64_t kSeed = 7;

MixturePoint Point(int64_t step, double a, double b, double c) {
  return MixturePoint{step, {{"a", a}, {"b", b}, {"c", c}}};
}
// Three different schedules: constant, a ramp, constant.
const std::vector<MixturePoint> kA = {Point(0, 0.6, 0.3, 0.1)};
const std::vector<MixturePoint> kB = {Point(0, 0.1, 0.1, 0.8), Point(30, 0.5, 0.2, 0.3)};
const std::vector<MixturePoint> kC = {Point(0, 0.2, 0.7, 0.1)};

MixtureSpec Spec(const std::vector<MixturePoint>& schedule, std::vector<MixtureSegment> segments) {
  return MixtureSpec{kDatasets, schedule, std::move(segments), kEpoch, kSeed};
}

// A job of the mixture under `schedule`, dealt to `world` ranks of `batch`.
std::shared_ptr<const MixtureJobPlan> Job(const std::vector<MixturePoint>& schedule, int world,
                                          int batch) {
  PlanConfig config;
  config.world_size = world;
  config.batch_size = batch;
  config.split = Split::kSample;
  config.remainder = Remainder::kPad;
  config.seed = kSeed;
  std::vector<std::vector<uint32_t>> shards;
  for (const MixtureDataset& d : kDatasets) shards.push_back({static_cast<uint32_t>(d.samples)});
  absl::StatusOr<std::shared_ptr<const MixtureJobPlan>> job =
      MixtureJobPlan::Create(Spec(schedule, {}), shards, config);
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

MixtureState StateAt(const MixtureJobPlan& plan, int64_t position) {
  absl::StatusOr<MixtureState> state =
      plan.StateAt(position / static_cast<int64_t>(kEpoch), position % kEpoch);
  EXPECT_TRUE(state.ok()) << state.status();
  return *state;
}

std::vector<uint64_t> Draws(const MixtureState& state) {
  std::vector<uint64_t> out;
  for (const MixtureDatasetState& d : state.datasets) out.push_back(d.draws);
  return out;
}

// Each dataset's (pass, place in the pass), as the draw counts give them.
std::vector<std::pair<uint64_t, uint64_t>> Passes(const MixtureState& state) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (size_t i = 0; i < kDatasets.size(); ++i) {
    const uint64_t n = state.datasets[i].draws;
    out.emplace_back(n / kDatasets[i].samples, n % kDatasets[i].samples);
  }
  return out;
}

class MixtureChainTest : public ::testing::Test {
 protected:
  // The truth: A (2 ranks x 4) to p1, then B (1 rank x 5) resumed there to p2, by the
  // planner alone, as each run drew.
  void SetUp() override {
    absl::StatusOr<MixturePlanner> a = MixturePlanner::Create(Spec(kA, {seg_a_}));
    ASSERT_TRUE(a.ok()) << a.status();
    MixturePlanner::Cursor cursor = a->Start();
    a->Advance(&cursor, kP1);
    at_p1_ = cursor.state();
    seg_b_ = MixtureSegment{kP1, a->StepOf(kP1 - 1) + 1, 5};
    absl::StatusOr<MixturePlanner> b = MixturePlanner::Create(Spec(kB, {seg_a_, seg_b_}));
    ASSERT_TRUE(b.ok()) << b.status();
    absl::StatusOr<MixturePlanner::Cursor> resumed = b->Resume(at_p1_);
    ASSERT_TRUE(resumed.ok()) << resumed.status();
    b->Advance(&*resumed, kP2 - kP1);
    at_p2_ = resumed->state();
  }

  static constexpr int64_t kP1 = 68;
  static constexpr int64_t kP2 = 141;
  const MixtureSegment seg_a_{0, 0, 8};
  MixtureSegment seg_b_;
  MixtureState at_p1_;
  MixtureState at_p2_;
};

TEST_F(MixtureChainTest, TheServedResumeOfBReachesTheTruth) {
  absl::StatusOr<std::shared_ptr<const MixtureJobPlan>> b =
      Job(kB, 1, 5)->Resumed(kP1, {{seg_a_, kA}});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(Draws(StateAt(**b, kP1)), Draws(at_p1_));
  EXPECT_EQ(Draws(StateAt(**b, kP2)), Draws(at_p2_));
  EXPECT_EQ(StateAt(**b, kP2).datasets[2].lag, at_p2_.datasets[2].lag);
}

TEST_F(MixtureChainTest, ThirdRunReplaysEachSegmentUnderItsOwnSchedule) {
  absl::StatusOr<std::shared_ptr<const MixtureJobPlan>> c =
      Job(kC, 3, 2)->Resumed(kP2, {{seg_a_, kA}, {seg_b_, kB}});
  ASSERT_TRUE(c.ok()) << c.status();
  const MixtureState origin = StateAt(**c, kP2);
  EXPECT_EQ(Passes(origin), Passes(at_p2_));
  for (const MixtureDatasetState& d : origin.datasets) EXPECT_EQ(d.lag, 0);  // another schedule
  // The single-schedule replay (all of [0, p2) under B's) reaches another state: the
  // case this guards against.
  absl::StatusOr<std::shared_ptr<const MixtureJobPlan>> old =
      Job(kC, 3, 2)->Resumed(kP2, {{seg_a_, kB}, {seg_b_, {}}});
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_NE(Passes(StateAt(**old, kP2)), Passes(at_p2_));
}

TEST_F(MixtureChainTest, SameWeightsAtAnotherWorldSizeKeepTheLags) {
  // C under B's schedule: an elastic resume of B, nothing restarts at p2.
  absl::StatusOr<std::shared_ptr<const MixtureJobPlan>> c =
      Job(kB, 3, 2)->Resumed(kP2, {{seg_a_, kA}, {seg_b_, kB}});
  ASSERT_TRUE(c.ok()) << c.status();
  const MixtureState origin = StateAt(**c, kP2);
  ASSERT_EQ(Draws(origin), Draws(at_p2_));
  for (size_t i = 0; i < kDatasets.size(); ++i) {
    EXPECT_EQ(origin.datasets[i].lag, at_p2_.datasets[i].lag) << "dataset " << i;
  }
}

TEST_F(MixtureChainTest, ChainsAFourthRun) {
  // D resumes C (C drew [p2, p3) under kC at 3 x 2): three schedule changes replayed.
  std::shared_ptr<const MixtureJobPlan> job_c = Job(kC, 3, 2);
  absl::StatusOr<std::shared_ptr<const MixtureJobPlan>> c =
      job_c->Resumed(kP2, {{seg_a_, kA}, {seg_b_, kB}});
  ASSERT_TRUE(c.ok()) << c.status();
  constexpr int64_t kP3 = 230;
  const MixtureState at_p3 = StateAt(**c, kP3);
  const MixtureSegment seg_c = (*c)->spec().segments.back();
  ASSERT_EQ(seg_c.start_position, kP2);
  absl::StatusOr<std::shared_ptr<const MixtureJobPlan>> d =
      Job(kA, 1, 3)->Resumed(kP3, {{seg_a_, kA}, {seg_b_, kB}, {seg_c, kC}});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(Passes(StateAt(**d, kP3)), Passes(at_p3));
}

TEST_F(MixtureChainTest, RefusesABadSegmentScheduleNamingTheSegment) {
  const std::vector<MixturePoint> stranger = {MixturePoint{0, {{"a", 1}, {"z", 1}, {"c", 1}}}};
  absl::StatusOr<std::shared_ptr<const MixtureJobPlan>> c =
      Job(kC, 3, 2)->Resumed(kP2, {{seg_a_, kA}, {seg_b_, stranger}});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("earlier segment 1"), std::string::npos) << c.status();
  EXPECT_NE(c.status().message().find("'z'"), std::string::npos) << c.status();
}

}  // namespace
}  // namespace shardcast
