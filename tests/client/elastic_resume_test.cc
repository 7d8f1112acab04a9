// Elastic resume through shardcast-train against a real shardcast-server: 2 Gloo ranks
// train split sample and stop mid-epoch with a checkpoint (--max-steps); --resume on 3
// ranks with another batch size continues the same epoch from the samples consumed in
// it. The keys trained on in that epoch, both runs together, have no duplicate; with
// remainder pad they are exactly the dataset. Split shard is refused with the reason.
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
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

constexpr int kSamples = 50;   // 2 ranks x 2 = 4 and 3 x 3 = 9 divide neither it nor 50 - 20
constexpr int kStopAfter = 5;  // steps of the first run: 5 x 2 x 2 = 20 samples consumed

// The non-padding keys of every "step" line of `path` (one rank's metrics), in order.
std::vector<std::string> StepKeys(const std::string& path) {
  std::vector<std::string> keys;
  std::istringstream lines(ReadWholeFile(path));
  std::string line;
  static const std::regex keys_re("\"keys\":\\[([^\\]]*)\\]");
  while (std::getline(lines, line)) {
    if (line.find("\"event\":\"step\"") == std::string::npos) continue;
    std::smatch m;
    if (!std::regex_search(line, m, keys_re)) continue;
    for (absl::string_view k : absl::StrSplit(std::string(m[1]), ',', absl::SkipEmpty())) {
      if (k.size() > 2) keys.emplace_back(k.substr(1, k.size() - 2));  // padding: ""
    }
  }
  return keys;
}

class ElasticResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shards_ = dir_.path() + "/shards";
    ASSERT_TRUE(MakeSyntheticShards(shards_, kSamples, /*num_classes=*/3, /*size=*/16,
                                    /*per_shard=*/10)
                    .ok());
    server_ = std::make_unique<ServerProcess>(shards_, dir_.path());
    absl::Status started = server_->Start(0, {"--resize", "16", "--crop", "16"});
    ASSERT_TRUE(started.ok()) << started;
  }
  void TearDown() override {
    if (server_) server_->Kill(SIGTERM);
  }

  // One launch of `world` local ranks; returns the exit status (-1: did not finish).
  int Run(const std::string& tag, int world, int batch, const std::vector<std::string>& extra) {
    const TrainerFiles files{dir_.path(), tag};
    std::vector<std::string> flags = {"--server",      server_->address(),
                                      "--job-id",      "elastic-" + tag,
                                      "--batch-size",  absl::StrCat(batch),
                                      "--epochs",      "1",
                                      "--seed",        "5",
                                      "--arch",        "small-cnn",
                                      "--threads",     "1",
                                      "--no-progress", "--log-keys",
                                      "--ckpt-dir",    dir_.path() + "/ckpt"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    err_ = files.err_path();
    const TrainerExit exit = RunLocalRanks(world, flags, files, std::chrono::minutes(3));
    EXPECT_TRUE(exit.started.ok()) << exit.started;
    return exit.code();
  }

  // Keys of the epoch over the ranks of both runs.
  std::vector<std::string> EpochKeys(const std::string& first, const std::string& second) {
    std::vector<std::string> keys;
    for (const auto& [tag, world] : {std::pair<std::string, int>{first, 2}, {second, 3}}) {
      for (int r = 0; r < world; ++r) {
        for (std::string& k : StepKeys(TrainerFiles{dir_.path(), tag}.metrics_path(r))) {
          keys.push_back(std::move(k));
        }
      }
    }
    return keys;
  }

  TempDir dir_;
  std::string shards_, err_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(ElasticResumeTest, TwoRanksThenThreeWithPadServeEverySampleExactlyOnce) {
  const std::vector<std::string> job = {"--split", "sample", "--remainder", "pad"};
  std::vector<std::string> stop = job;
  stop.insert(stop.end(), {"--max-steps", absl::StrCat(kStopAfter)});
  ASSERT_EQ(Run("two", 2, 2, stop), 0) << ReadWholeFile(err_);
  ASSERT_EQ(StepKeys(dir_.path() + "/two.0.jsonl").size(), static_cast<size_t>(kStopAfter * 2));

  std::vector<std::string> resume = job;
  resume.insert(resume.end(), {"--resume", dir_.path() + "/ckpt"});
  ASSERT_EQ(Run("three", 3, 3, resume), 0) << ReadWholeFile(err_);
  // 30 samples left, dealt over 3 ranks x 3: ceil(30 / 9) = 4 batches per rank.
  EXPECT_EQ(StepKeys(dir_.path() + "/three.0.jsonl").size() +
                StepKeys(dir_.path() + "/three.1.jsonl").size() +
                StepKeys(dir_.path() + "/three.2.jsonl").size(),
            static_cast<size_t>(kSamples - kStopAfter * 4));
  EXPECT_NE(ReadWholeFile(dir_.path() + "/three.0.jsonl").find("\"sample_offset\":20"),
            std::string::npos);

  const std::vector<std::string> keys = EpochKeys("two", "three");
  const std::set<std::string> unique(keys.begin(), keys.end());
  EXPECT_EQ(unique.size(), keys.size()) << "a sample was trained on twice in the epoch";
  EXPECT_EQ(keys.size(), static_cast<size_t>(kSamples)) << "pad: every sample exactly once";
}

TEST_F(ElasticResumeTest, WithDropNoSampleIsServedTwice) {
  const std::vector<std::string> job = {"--split", "sample", "--remainder", "drop"};
  std::vector<std::string> stop = job;
  stop.insert(stop.end(), {"--max-steps", absl::StrCat(kStopAfter)});
  ASSERT_EQ(Run("two", 2, 2, stop), 0) << ReadWholeFile(err_);
  std::vector<std::string> resume = job;
  resume.insert(resume.end(), {"--resume", dir_.path() + "/ckpt"});
  ASSERT_EQ(Run("three", 3, 4, resume), 0) << ReadWholeFile(err_);
  const std::vector<std::string> keys = EpochKeys("two", "three");
  const std::set<std::string> unique(keys.begin(), keys.end());
  EXPECT_EQ(unique.size(), keys.size()) << "a sample was trained on twice in the epoch";
  // 20 before, then 30 // (3 x 4) = 2 batches per rank: 24; the last 6 are dropped.
  EXPECT_EQ(keys.size(), static_cast<size_t>(20 + 24));
}

TEST_F(ElasticResumeTest, SplitShardIsRefusedWithTheReason) {
  const std::vector<std::string> job = {"--split", "shard"};
  std::vector<std::string> stop = job;
  stop.insert(stop.end(), {"--max-steps", "2"});
  ASSERT_EQ(Run("two", 2, 2, stop), 0) << ReadWholeFile(err_);
  std::vector<std::string> resume = job;
  resume.insert(resume.end(), {"--resume", dir_.path() + "/ckpt"});
  EXPECT_NE(Run("three", 3, 2, resume), 0);
  EXPECT_NE(ReadWholeFile(err_).find("needs split sample"), std::string::npos)
      << ReadWholeFile(err_);
}

}  // namespace
}  // namespace shardcast::train
