// `shardcast-ctl plan` as a real process: on real shards (written by shardcast-pack) and on
// --sizes, its lines equal the library's plan; refusals and bad flags exit non-zero.
#include <stdio.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/plan/epoch_plan.h"
#include "common/shards/dataset_index.h"
#include "gtest/gtest.h"
#include "tests/common/shard_test_util.h"
#include "tests/support/child_process.h"
#include "tools/pack/synthetic_dataset.h"

namespace shardcast {
namespace {

const std::string kCtl = std::string(SHARDCAST_BINARY_DIR) + "/client/shardcast-ctl";

using Result = testing_util::CommandOutput;

// Runs shardcast-ctl with `args`; stdout is captured, stderr discarded.
Result RunCtl(const std::string& args) {
  return testing_util::RunShellCapture(kCtl + " " + args + " 2>/dev/null");
}

// The lines the command must print, from the library.
std::string Expected(const std::vector<uint32_t>& sizes, const PlanConfig& config, int64_t epoch) {
  auto plan = EpochPlan::Create(sizes, config, epoch);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return "";
  std::string out;
  PlannedBatch batch;
  for (int32_t r = 0; r < config.world_size; ++r) {
    auto it = (*plan)->Iterate(r, 0);
    while (it->Next(&batch)) {
      absl::StrAppend(&out, epoch, " ", r, " ", batch.index, " ",
                      absl::StrJoin(batch.samples, ",",
                                    [](std::string* s, const SampleRef& ref) {
                                      absl::StrAppend(s, ref.shard, ":", ref.index);
                                    }),
                      "\n");
    }
  }
  return out;
}

class PlanCommandTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(std::filesystem::exists(kCtl)) << kCtl << " is not built"; }
};

TEST_F(PlanCommandTest, RealShardsMatchTheLibraryPlan) {
  shard_testing::ScopedTempDir dir;
  pack::SyntheticOptions options;
  options.num_samples = 30;  // shards of 7, 7, 7, 7, 2
  options.per_shard = 7;
  options.width = options.height = 8;
  options.num_classes = 3;
  options.threads = 1;
  ASSERT_TRUE(pack::WriteSyntheticDataset(dir.path(), options).ok());
  auto index = BuildDatasetIndex(dir.path(), IndexOptions{});
  ASSERT_TRUE(index.ok()) << index.status();
  const std::vector<uint32_t> sizes = index->ShardSampleCounts();
  ASSERT_EQ(sizes, (std::vector<uint32_t>{7, 7, 7, 7, 2}));

  PlanConfig c;
  c.world_size = 2;
  c.batch_size = 3;
  Result r = RunCtl("plan --shards " + dir.path() + " --world-size 2 --batch-size 3");
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, Expected(sizes, c, 0));
  // Rank 1 reads shards 1, 3: 14 samples, 4 batches; n = 30 // 6 = 5: it repeats.
  EXPECT_NE(r.out.find("0 1 4 1:0,1:1,1:2\n"), std::string::npos) << r.out;

  c.split = Split::kSample;
  c.remainder = Remainder::kPad;
  c.seed = 9;
  c.block_size = 2;
  r = RunCtl("plan --shards=" + dir.path() +
             " --world-size=2 --batch-size=4 --split sample --remainder pad --seed 9 --block-size 2"
             " --epoch 3");
  c.batch_size = 4;
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, Expected(sizes, c, 3));
  EXPECT_NE(r.out.find("-1:-1"), std::string::npos);  // 30 of 32 slots: 2 padding
}

// --fields plans what a job asking for those fields is served: the samples without a
// required one are left out, and INDEX is still the sample's position in its shard.
TEST_F(PlanCommandTest, FieldsPlanOnlyTheSamplesAJobWouldBeServed) {
  shard_testing::ScopedTempDir dir;
  std::vector<shard_testing::FileSpec> files;
  for (int i = 0; i < 6; ++i) {
    const std::string key = absl::StrCat("t", i);
    if (i != 1 && i != 4) files.push_back({key + ".txt", "caption " + key});
    files.push_back({key + ".json", "{}"});
  }
  shard_testing::MakeTar(dir.path(), files, shard_testing::TarWriter::kPythonPax,
                         dir.path() + "/text-0.tar");
  Result r = RunCtl("plan --shards " + dir.path() +
                    " --world-size 1 --batch-size 2 --split sample --fields txt --no-image");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::multiset<std::string> served;
  for (absl::string_view line : absl::StrSplit(r.out, '\n', absl::SkipEmpty())) {
    const std::vector<std::string> parts = absl::StrSplit(line, ' ');
    ASSERT_EQ(parts.size(), 4u) << line;
    for (absl::string_view ref : absl::StrSplit(parts[3], ',')) served.emplace(ref);
  }
  EXPECT_EQ(served, (std::multiset<std::string>{"0:0", "0:2", "0:3", "0:5"})) << r.out;

  // Without --no-image the job is refused as the server refuses it (no image anywhere).
  r = RunCtl("plan --shards " + dir.path() + " --world-size 1 --batch-size 2 --fields txt");
  EXPECT_EQ(r.exit_code, 1);
  // --fields needs the samples' members: not with --sizes.
  r = RunCtl("plan --sizes 3,3 --world-size 1 --batch-size 2 --fields txt --no-image");
  EXPECT_EQ(r.exit_code, 2);
}

TEST_F(PlanCommandTest, SizesRankAndShuffleFlags) {
  PlanConfig c;
  c.world_size = 3;
  c.batch_size = 7;
  c.workers = 2;
  c.shuffle_shards = true;
  c.shuffle_buffer = 10;
  c.seed = 123;
  const std::vector<uint32_t> sizes(12, 20);
  const std::string flags =
      "--world-size 3 --batch-size 7 --workers 2 --shuffle-shards --shuffle-buffer 10 --seed 123 "
      "--epoch 2 --sizes " +
      absl::StrJoin(sizes, ",");
  Result all = RunCtl("plan " + flags);
  ASSERT_EQ(all.exit_code, 0);
  EXPECT_EQ(all.out, Expected(sizes, c, 2));
  Result one = RunCtl("plan " + flags + " --rank 1");
  ASSERT_EQ(one.exit_code, 0);
  std::string rank1;
  for (absl::string_view line : absl::StrSplit(all.out, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "2 1 ")) absl::StrAppend(&rank1, line, "\n");
  }
  EXPECT_EQ(one.out, rank1);
  EXPECT_EQ(std::count(one.out.begin(), one.out.end(), '\n'), 11);
}

TEST_F(PlanCommandTest, RefusalsAndBadFlagsExitNonZero) {
  EXPECT_EQ(RunCtl("plan --sizes 5 --world-size 2 --batch-size 4").exit_code, 1);    // n == 0
  EXPECT_EQ(RunCtl("plan --sizes 5,5 --world-size 3 --batch-size 1").exit_code, 1);  // S < W
  EXPECT_EQ(RunCtl("plan --sizes 5,5 --world-size 1").exit_code, 2);  // no --batch-size
  EXPECT_EQ(RunCtl("plan --sizes 5,x --world-size 1 --batch-size 1").exit_code, 2);
  EXPECT_EQ(RunCtl("plan --sizes 5 --world-size 1 --batch-size 1 --split node").exit_code, 2);
  EXPECT_EQ(RunCtl("plan --sizes 5 --world-size 1 --batch-size 1 --bogus").exit_code, 2);
  EXPECT_EQ(RunCtl("plan --sizes 5 --world-size 2 --batch-size 1 --rank 2").exit_code, 2);
  EXPECT_EQ(RunCtl("plan --shards /nonexistent/shardcast --world-size 1 --batch-size 1").exit_code,
            1);
  // The old spellings are gone: every binary names these --world-size, --batch-size.
  EXPECT_EQ(RunCtl("plan --sizes 5,5 --world 1 --batch 1").exit_code, 2);
}

}  // namespace
}  // namespace shardcast
