// Issue 35: the ranks of one job agree on the job before the first batch. Two real
// shardcast-server processes (replicas) over the same shards, and shardcast-train with
// two Gloo ranks given both (rank 0 starts at the first replica, rank 1 at the second).
// Replicas run with other byte-changing settings: both ranks fail before their first
// batch, naming each rank's fingerprint, promptly (no hang, no batch of mixed bytes).
// Replicas run alike: the job trains.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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

constexpr int64_t kSamples = 72;
constexpr int kBatch = 8;  // 4 batches per rank per epoch (remainder drop), 5 (pad)

int CountOf(const std::string& text, const std::string& what) {
  int count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++count;
  }
  return count;
}

class RankAgreementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shards_ = dir_.path() + "/shards";
    ASSERT_TRUE(MakeSyntheticShards(shards_, kSamples, /*num_classes=*/3, /*size=*/16,
                                    /*per_shard=*/16)
                    .ok());
  }
  void TearDown() override {
    for (auto& replica : replicas_) replica->Kill(SIGTERM);
  }

  // Starts a replica over the shards with the common flags and `extra`.
  void StartReplica(const std::vector<std::string>& extra) {
    const std::string logs = absl::StrCat(dir_.path(), "/replica", replicas_.size());
    ASSERT_EQ(::mkdir(logs.c_str(), 0755), 0);
    replicas_.push_back(std::make_unique<ServerProcess>(shards_, logs));
    std::vector<std::string> flags = {"--resize", "16", "--crop", "16", "--decode-threads", "1"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    absl::Status started = replicas_.back()->Start(0, flags);
    ASSERT_TRUE(started.ok()) << started;
  }

  // shardcast-train on 2 local ranks given every replica; the exit status (-1: it did
  // not end within `limit`). Its stderr (both ranks') in err_.
  int Train(const std::string& tag, std::chrono::seconds limit = std::chrono::seconds(120)) {
    std::string servers;
    for (auto& replica : replicas_) {
      absl::StrAppend(&servers, servers.empty() ? "" : ",", replica->address());
    }
    const TrainerFiles files{dir_.path(), tag};
    const std::vector<std::string> flags = {
        "--server",  servers,  "--job-id",     tag, "--batch-size", absl::StrCat(kBatch),
        "--split",   "sample", "--epochs",     "1", "--arch",       "small-cnn",
        "--threads", "1",      "--no-progress"};
    const TrainerExit exit = RunLocalRanks(2, flags, files, limit);
    EXPECT_TRUE(exit.started.ok()) << exit.started;
    err_ = ReadWholeFile(files.err_path());
    return exit.code();
  }

  int Steps(const std::string& tag, int rank) {
    return CountOf(ReadWholeFile(TrainerFiles{dir_.path(), tag}.metrics_path(rank)),
                   "\"event\":\"step\"");
  }

  TempDir dir_;
  std::string shards_;
  std::vector<std::unique_ptr<ServerProcess>> replicas_;
  std::string err_;
};

TEST_F(RankAgreementTest, RanksAtReplicasWithOtherSettingsBothFailBeforeTheFirstBatch) {
  StartReplica({});
  StartReplica({"--max-member-bytes", "100"});  // substitutes every image
  const int code = Train("mixed");
  ASSERT_NE(code, -1) << "shardcast-train hung; stderr:\n" << err_;
  EXPECT_NE(code, 0) << err_;
  // Each rank says it, with both ranks' fingerprints.
  EXPECT_EQ(CountOf(err_, "the ranks of this job disagree before the first batch"), 2) << err_;
  EXPECT_TRUE(absl::StrContains(err_, "job fingerprint: rank 0 has ")) << err_;
  EXPECT_TRUE(absl::StrContains(err_, ", rank 1 has ")) << err_;
  EXPECT_EQ(Steps("mixed", 0), 0);
  EXPECT_EQ(Steps("mixed", 1), 0);
}

// The DDP hang of the issue: the trainer leaves the remainder to the server, and the
// replicas' defaults differ, so the ranks' epochs have 4 and 5 batches.
TEST_F(RankAgreementTest, RanksAtReplicasWithOtherBatchCountsBothFailBeforeTheFirstBatch) {
  StartReplica({});
  StartReplica({"--remainder", "pad"});
  const int code = Train("counts");
  ASSERT_NE(code, -1) << "shardcast-train hung; stderr:\n" << err_;
  EXPECT_NE(code, 0) << err_;
  EXPECT_EQ(CountOf(err_, "the ranks of this job disagree before the first batch"), 2) << err_;
  EXPECT_EQ(CountOf(err_, "batches per epoch: rank 0 has 4, rank 1 has 5"), 2) << err_;
  EXPECT_EQ(Steps("counts", 0), 0);
  EXPECT_EQ(Steps("counts", 1), 0);
}

TEST_F(RankAgreementTest, RanksAtReplicasRunAlikeTrain) {
  StartReplica({});
  StartReplica({});
  ASSERT_EQ(Train("alike"), 0) << err_;
  EXPECT_EQ(Steps("alike", 0), kSamples / (2 * kBatch));
  EXPECT_EQ(Steps("alike", 1), kSamples / (2 * kBatch));
}

}  // namespace
}  // namespace shardcast::train
