// A mixture trained by shardcast-train against a real shardcast-server (real processes,
// real tars, Gloo on loopback) and resumed from its checkpoints as the Python Loader
// resumes one (mix_resume): a schedule on 2 ranks x 4 stopped mid-epoch goes on on
// 1 rank x 4, is stopped again and goes on on 2 x 4; constant weights go on with new
// ones, and with new ones again (resumes chain: each run replayed under its own weights).
// After every resume the samples served (dataset and key, by global position) are
// exactly those the planner deals from that position (the server's replay, computed
// here from the hand-derived segments), no position is served twice, every dataset's
// passes are whole, and the steps go on from the checkpoint's. Other data (another seed)
// is refused naming mix_data_fingerprint.
#include <algorithm>
#include <csignal>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/plan/mixture_plan.h"
#include "gtest/gtest.h"
#include "tests/support/child_process.h"
#include "tests/support/server_process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/trainer_process.h"

namespace shardcast::train {
namespace {

using testing_util::MakeSyntheticShards;
using testing_util::ReadWholeFile;
using testing_util::RunLocalRanks;
using testing_util::ServerProcess;
using testing_util::TempDir;
using testing_util::TrainerExit;
using testing_util::TrainerFiles;

constexpr int64_t kS = 48;  // samples per epoch
constexpr uint64_t kSeed = 5;
const std::vector<std::pair<std::string, uint64_t>> kDatasets = {{"a", 20}, {"b", 12}};
constexpr char kSchedule[] = "0:a=1,b=1;4:a=0.2,b=0.8";

struct Served {
  std::string dataset;
  std::string key;
  bool operator==(const Served& o) const { return dataset == o.dataset && key == o.key; }
};
std::ostream& operator<<(std::ostream& out, const Served& s) {
  return out << s.dataset << "/" << s.key;
}

int64_t IntField(const std::string& line, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(line, m, std::regex("\"" + name + "\":(-?\\d+)"))) return -1;
  return std::stoll(m[1]);
}

std::vector<std::string> ListField(const std::string& line, const std::string& name) {
  std::vector<std::string> out;
  std::smatch m;
  if (!std::regex_search(line, m, std::regex("\"" + name + "\":\\[([^\\]]*)\\]"))) return out;
  if (m[1].length() == 0) return out;
  for (absl::string_view v : absl::StrSplit(std::string(m[1]), ',')) {
    out.emplace_back(v.substr(1, v.size() - 2));  // strip the quotes
  }
  return out;
}

// One run of `world` ranks of `batch` as it went: its first step, and what it served by
// global position (e*S + the epoch's offset + (j*W + r)*B + k; padding left out).
struct RunSeen {
  int64_t start_step = -1;
  int64_t first_step = -1;  // the step number of its first step line
  std::map<int64_t, Served> served;
};

RunSeen ReadRun(const TrainerFiles& files, int world, int batch) {
  RunSeen run;
  for (int r = 0; r < world; ++r) {
    std::istringstream lines(ReadWholeFile(files.metrics_path(r)));
    std::string line;
    int64_t start_epoch = -1, start_offset = 0;
    while (std::getline(lines, line)) {
      if (line.find("\"event\":\"start\"") != std::string::npos) {
        start_epoch = IntField(line, "epoch");
        start_offset = IntField(line, "sample_offset");
        run.start_step = IntField(line, "step");
      }
      if (line.find("\"event\":\"step\"") == std::string::npos) continue;
      const int64_t epoch = IntField(line, "epoch"), j = IntField(line, "batch");
      if (run.first_step < 0) run.first_step = IntField(line, "step");
      const std::vector<std::string> keys = ListField(line, "keys");
      const std::vector<std::string> datasets = ListField(line, "datasets");
      EXPECT_EQ(keys.size(), datasets.size()) << line;
      const int64_t base = epoch * kS + (epoch == start_epoch ? start_offset : 0);
      for (size_t k = 0; k < keys.size() && k < datasets.size(); ++k) {
        if (keys[k].empty()) continue;  // padding
        const int64_t position = base + (j * world + r) * batch + static_cast<int64_t>(k);
        EXPECT_TRUE(run.served.emplace(position, Served{datasets[k], keys[k]}).second)
            << "position " << position << " served twice in one run";
      }
    }
  }
  return run;
}

MixtureSpec Spec(std::vector<MixturePoint> schedule, std::vector<MixtureSegment> segments) {
  MixtureSpec spec;
  for (const auto& [name, samples] : kDatasets) spec.datasets.push_back({name, samples});
  spec.schedule = std::move(schedule);
  spec.segments = std::move(segments);
  spec.samples_per_epoch = kS;
  spec.seed = kSeed;
  return spec;
}

const std::vector<MixturePoint> kSchedulePoints = {{0, {{"a", 1}, {"b", 1}}},
                                                   {4, {{"a", 0.2}, {"b", 0.8}}}};

// An earlier run as the server replays it: its spec (schedule, segments up to its own)
// and the position the next run began at.
struct EarlierRun {
  MixtureSpec spec;
  int64_t end = 0;
};

// What the planner deals at positions [from, to) to a run resumed at `from` (the server's
// MixtureJobPlan::Resumed): each earlier run replayed from the state the one before it
// left, up to its end (the last's: `from`), then `after` on from there.
std::map<int64_t, Served> Planned(const std::vector<EarlierRun>& earlier, const MixtureSpec& after,
                                  int64_t from, int64_t to) {
  MixtureState state;
  for (size_t i = 0; i < earlier.size() && from > 0; ++i) {
    absl::StatusOr<MixturePlanner> replay = MixturePlanner::Create(earlier[i].spec);
    EXPECT_TRUE(replay.ok()) << replay.status();
    absl::StatusOr<MixturePlanner::Cursor> cursor =
        i == 0 ? replay->Start() : replay->Resume(state);
    EXPECT_TRUE(cursor.ok()) << cursor.status();
    replay->Advance(&*cursor, earlier[i].end - cursor->position());
    state = cursor->state();
  }
  absl::StatusOr<MixturePlanner> planner = MixturePlanner::Create(after);
  EXPECT_TRUE(planner.ok()) << planner.status();
  absl::StatusOr<MixturePlanner::Cursor> resumed =
      from == 0 ? planner->Start() : planner->Resume(state);
  EXPECT_TRUE(resumed.ok()) << resumed.status();
  std::map<int64_t, Served> out;
  for (int64_t p = from; p < to; ++p) {
    const MixtureDraw draw = planner->Next(&*resumed);
    // A synthetic dataset's sample i is key %08d, all usable, in shard order.
    out[p] = Served{kDatasets[static_cast<size_t>(draw.dataset)].first,
                    absl::StrFormat("%08d", draw.index)};
  }
  return out;
}

// One earlier run, `before`, up to `from`.
std::map<int64_t, Served> Planned(const MixtureSpec& before, const MixtureSpec& after, int64_t from,
                                  int64_t to) {
  return Planned({EarlierRun{before, from}}, after, from, to);
}

// Every served position of `run` is the planned one.
void ExpectPlanned(const RunSeen& run, const std::map<int64_t, Served>& planned) {
  ASSERT_FALSE(run.served.empty());
  for (const auto& [position, served] : run.served) {
    auto it = planned.find(position);
    ASSERT_NE(it, planned.end()) << "position " << position << " outside the run's range";
    EXPECT_EQ(served, it->second) << "position " << position;
  }
}

class MixTrainResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::string> flags = {"--resize", "16", "--crop", "16"};
    for (const auto& [name, samples] : kDatasets) {
      const std::string dir = dir_.path() + "/" + name;
      ASSERT_TRUE(MakeSyntheticShards(dir, static_cast<int64_t>(samples), /*num_classes=*/3,
                                      /*size=*/16, /*per_shard=*/samples / 2)
                      .ok());
      flags.insert(flags.end(), {"--dataset", absl::StrCat(name, "=", dir)});
    }
    server_ = std::make_unique<ServerProcess>(dir_.path() + "/a", dir_.path());
    absl::Status started = server_->Start(0, flags);
    ASSERT_TRUE(started.ok()) << started;
  }
  void TearDown() override {
    if (server_) server_->Kill(SIGTERM);
  }

  // One launch of `world` local ranks of `batch`; returns the exit status.
  int Run(const std::string& tag, int world, int batch, const std::string& mix,
          const std::vector<std::string>& extra) {
    const TrainerFiles files{dir_.path(), tag};
    std::vector<std::string> flags = {"--server",
                                      server_->address(),
                                      "--job-id",
                                      "mix-" + tag,
                                      "--batch-size",
                                      absl::StrCat(batch),
                                      "--mix",
                                      mix,
                                      "--samples-per-epoch",
                                      absl::StrCat(kS),
                                      "--epochs",
                                      "2",
                                      "--arch",
                                      "small-cnn",
                                      "--threads",
                                      "1",
                                      "--no-progress",
                                      "--log-keys",
                                      "--ckpt-dir",
                                      dir_.path() + "/ckpt"};
    if (std::find(extra.begin(), extra.end(), "--seed") == extra.end()) {
      flags.insert(flags.end(), {"--seed", absl::StrCat(kSeed)});
    }
    flags.insert(flags.end(), extra.begin(), extra.end());
    err_ = files.err_path();
    const TrainerExit exit = RunLocalRanks(world, flags, files, std::chrono::minutes(3));
    EXPECT_TRUE(exit.started.ok()) << exit.started;
    return exit.code();
  }
  RunSeen Seen(const std::string& tag, int world, int batch) {
    return ReadRun(TrainerFiles{dir_.path(), tag}, world, batch);
  }
  std::string Resume() const { return dir_.path() + "/ckpt"; }

  TempDir dir_;
  std::string err_;
  std::unique_ptr<ServerProcess> server_;
};

// Each dataset's keys in the order served, in chunks of its size: no key twice in one.
void ExpectWholePasses(const std::map<int64_t, Served>& sequence) {
  for (const auto& [name, samples] : kDatasets) {
    std::vector<std::string> keys;
    for (const auto& [position, served] : sequence) {
      if (served.dataset == name) keys.push_back(served.key);
    }
    for (size_t start = 0; start < keys.size(); start += samples) {
      const size_t end = std::min(keys.size(), start + samples);
      const std::set<std::string> pass(keys.begin() + start, keys.begin() + end);
      EXPECT_EQ(pass.size(), end - start) << name << ": a sample twice in the pass at " << start;
    }
  }
}

TEST_F(MixTrainResumeTest, AScheduleResumesAtOtherGlobalBatchesTwice) {
  // 3 steps of 2 x 4: positions 0..23 (steps 0..2).
  ASSERT_EQ(Run("one", 2, 4, kSchedule, {"--max-steps", "3"}), 0) << ReadWholeFile(err_);
  // 1 x 4 from position 24, step 3: the rest of epoch 0 and 3 batches of epoch 1 (up to
  // step 12): positions 24..59.
  ASSERT_EQ(Run("two", 1, 4, kSchedule, {"--resume", Resume(), "--max-steps", "12"}), 0)
      << ReadWholeFile(err_);
  // 2 x 4 again from position 60, step 3 + (59 - 24) // 4 + 1 = 12: the rest of epoch 1
  // (36 positions: 4 batches per rank, the last 4 positions dropped).
  ASSERT_EQ(Run("three", 2, 4, kSchedule, {"--resume", Resume()}), 0) << ReadWholeFile(err_);

  const RunSeen one = Seen("one", 2, 4), two = Seen("two", 1, 4), three = Seen("three", 2, 4);
  const std::vector<MixtureSegment> s1 = {{0, 0, 8}};
  const std::vector<MixtureSegment> s2 = {{0, 0, 8}, {24, 3, 4}};
  const std::vector<MixtureSegment> s3 = {{0, 0, 8}, {24, 3, 4}, {60, 12, 8}};
  ExpectPlanned(one, Planned(Spec(kSchedulePoints, s1), Spec(kSchedulePoints, s1), 0, 24));
  ExpectPlanned(two, Planned(Spec(kSchedulePoints, s1), Spec(kSchedulePoints, s2), 24, 60));
  ExpectPlanned(three, Planned({{Spec(kSchedulePoints, s1), 24}, {Spec(kSchedulePoints, s2), 60}},
                               Spec(kSchedulePoints, s3), 60, 96));

  std::map<int64_t, Served> all;
  for (const RunSeen* run : {&one, &two, &three}) {
    for (const auto& [position, served] : run->served) {
      EXPECT_TRUE(all.emplace(position, served).second) << "position " << position << " twice";
    }
  }
  ASSERT_EQ(all.size(), 92u);
  EXPECT_EQ(all.begin()->first, 0);
  EXPECT_EQ(all.rbegin()->first, 91);
  ExpectWholePasses(all);
  // The steps go on from the checkpoints'.
  EXPECT_EQ(two.start_step, 3);
  EXPECT_EQ(two.first_step, 4);
  EXPECT_EQ(three.start_step, 12);
  EXPECT_EQ(three.first_step, 13);
}

TEST_F(MixTrainResumeTest, NewWeightsContinueEveryPassAndOtherDataIsRefused) {
  ASSERT_EQ(Run("one", 2, 4, "a=5,b=3", {"--max-steps", "3"}), 0) << ReadWholeFile(err_);
  // Another seed is another mixture's data: refused, naming the fingerprints.
  EXPECT_NE(Run("seed", 1, 4, "a=1,b=4", {"--resume", Resume(), "--seed", "6"}), 0);
  EXPECT_NE(ReadWholeFile(err_).find("mix_data_fingerprint"), std::string::npos)
      << ReadWholeFile(err_);
  ASSERT_EQ(Run("two", 2, 4, "a=1,b=4", {"--resume", Resume()}), 0) << ReadWholeFile(err_);

  const RunSeen one = Seen("one", 2, 4), two = Seen("two", 2, 4);
  const std::vector<MixturePoint> before = {{0, {{"a", 5}, {"b", 3}}}};
  const std::vector<MixturePoint> after = {{0, {{"a", 1}, {"b", 4}}}};
  ExpectPlanned(one, Planned(Spec(before, {{0, 0, 8}}), Spec(before, {{0, 0, 8}}), 0, 24));
  ExpectPlanned(two,
                Planned(Spec(before, {{0, 0, 8}}), Spec(after, {{0, 0, 8}, {24, 3, 8}}), 24, 96));
  std::map<int64_t, Served> all = one.served;
  for (const auto& [position, served] : two.served) {
    EXPECT_TRUE(all.emplace(position, served).second) << "position " << position << " twice";
  }
  ASSERT_EQ(all.size(), 96u);
  ExpectWholePasses(all);
  EXPECT_EQ(two.first_step, 4);
}

TEST_F(MixTrainResumeTest, ASecondWeightChangeReplaysEachRunUnderItsOwnWeights) {
  // Run one: 3 steps of 2 x 4 under a=5,b=3 (positions 0..23). Run two: 1 x 4 under
  // a=1,b=4 from position 24, step 3, up to step 8 (positions 24..43). Run three: 1 x 4
  // under a=4,b=1 from position 44, step 8, to the end (44..95). Run three's server must
  // replay [0, 24) under run one's weights and [24, 44) under run two's (the checkpoint
  // keeps each segment's schedule): a single schedule would put other draw counts at 44.
  ASSERT_EQ(Run("one", 2, 4, "a=5,b=3", {"--max-steps", "3"}), 0) << ReadWholeFile(err_);
  ASSERT_EQ(Run("two", 1, 4, "a=1,b=4", {"--resume", Resume(), "--max-steps", "8"}), 0)
      << ReadWholeFile(err_);
  ASSERT_EQ(Run("three", 1, 4, "a=4,b=1", {"--resume", Resume()}), 0) << ReadWholeFile(err_);

  const RunSeen one = Seen("one", 2, 4), two = Seen("two", 1, 4), three = Seen("three", 1, 4);
  const std::vector<MixturePoint> w1 = {{0, {{"a", 5}, {"b", 3}}}};
  const std::vector<MixturePoint> w2 = {{0, {{"a", 1}, {"b", 4}}}};
  const std::vector<MixturePoint> w3 = {{0, {{"a", 4}, {"b", 1}}}};
  const std::vector<MixtureSegment> s1 = {{0, 0, 8}};
  const std::vector<MixtureSegment> s2 = {{0, 0, 8}, {24, 3, 4}};
  const std::vector<MixtureSegment> s3 = {{0, 0, 8}, {24, 3, 4}, {44, 8, 4}};
  ExpectPlanned(one, Planned(Spec(w1, s1), Spec(w1, s1), 0, 24));
  ExpectPlanned(two, Planned(Spec(w1, s1), Spec(w2, s2), 24, 44));
  ExpectPlanned(three, Planned({{Spec(w1, s1), 24}, {Spec(w2, s2), 44}}, Spec(w3, s3), 44, 96));
  std::map<int64_t, Served> all;
  for (const RunSeen* run : {&one, &two, &three}) {
    for (const auto& [position, served] : run->served) {
      EXPECT_TRUE(all.emplace(position, served).second) << "position " << position << " twice";
    }
  }
  ASSERT_EQ(all.size(), 96u);
  ExpectWholePasses(all);
  EXPECT_EQ(three.start_step, 8);
  EXPECT_EQ(three.first_step, 9);
}

}  // namespace
}  // namespace shardcast::train
