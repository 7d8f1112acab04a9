// Split shard, unshuffled, against the seed's loader run for real: torch's DataLoader with
// K worker processes over webdataset's node/worker split (tests/common/
// plan_reference_torch.py, Debian's python with torch). Same batches, in the same order.
#include <stdio.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/plan/epoch_plan.h"
#include "gtest/gtest.h"

namespace shardcast {
namespace {

struct Case {
  std::vector<uint32_t> sizes;
  PlanConfig config;
};

std::string PlanLines(int index, const Case& t) {
  auto plan = EpochPlan::Create(t.sizes, t.config, 0);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return "";
  std::string out;
  PlannedBatch batch;
  for (int32_t r = 0; r < t.config.world_size; ++r) {
    auto it = (*plan)->Iterate(r, 0);
    while (it->Next(&batch)) {
      absl::StrAppend(&out, index, " ", r, " ", batch.index, " ",
                      absl::StrJoin(batch.samples, ",",
                                    [](std::string* s, const SampleRef& ref) {
                                      absl::StrAppend(s, ref.shard, ":", ref.index);
                                    }),
                      "\n");
    }
  }
  return out;
}

TEST(PlanTorchConformance, SplitShardEqualsDataLoaderWithWorkersRepeatSlice) {
  std::vector<Case> cases;
  auto add = [&cases](std::vector<uint32_t> sizes, int32_t world, int32_t batch, int32_t workers) {
    Case t;
    t.sizes = std::move(sizes);
    t.config.world_size = world;
    t.config.batch_size = batch;
    t.config.workers = workers;
    cases.push_back(t);
  };
  add({20, 20, 20, 20, 20}, 3, 7, 1);           // the seed's 5 shards, 3 ranks
  add(std::vector<uint32_t>(12, 20), 3, 7, 2);  // the seed's run: 3 GPUs, 2 workers, B=7
  add({6, 2, 6, 0, 0, 1}, 1, 2, 3);             // a worker runs dry first
  add({3, 9, 3, 9, 4, 9, 0, 9}, 2, 3, 2);       // uneven workers, repeated pass
  // Random uneven datasets with empty shards; only configs the planner accepts.
  std::mt19937_64 rng(77);
  while (cases.size() < 16) {
    Case t;
    const int shards = 1 + rng() % 14;
    for (int i = 0; i < shards; ++i) t.sizes.push_back(rng() % 5 == 0 ? 0 : rng() % 23);
    t.config.world_size = 1 + rng() % 3;
    t.config.batch_size = 1 + rng() % 6;
    t.config.workers = 1 + rng() % 3;
    if (BatchesPerRank(t.sizes, t.config).ok()) cases.push_back(t);
  }

  const std::string dir = ::testing::TempDir();
  const std::string input = dir + "/plan_torch_cases.txt";
  const std::string output = dir + "/plan_torch_out.txt";
  {
    std::ofstream in(input);
    for (const Case& t : cases) {
      in << absl::StrJoin(t.sizes, ",") << " " << t.config.world_size << " " << t.config.batch_size
         << " " << t.config.workers << "\n";
    }
  }
  const std::string command =
      absl::StrCat(REFERENCE_PYTHON, " ", SHARDCAST_SOURCE_DIR,
                   "/tests/common/plan_reference_torch.py < ", input, " > ", output);
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << command;
  std::map<int, std::string> torch_lines;
  {
    std::ifstream out(output);
    std::string line;
    while (std::getline(out, line)) {
      torch_lines[std::atoi(line.c_str())] += line + "\n";
    }
  }
  std::remove(input.c_str());
  std::remove(output.c_str());
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string ours = PlanLines(static_cast<int>(i), cases[i]);
    ASSERT_FALSE(ours.empty());
    EXPECT_EQ(ours, torch_lines[static_cast<int>(i)])
        << "case " << i << ": sizes " << absl::StrJoin(cases[i].sizes, ",") << " "
        << PlanConfigString(cases[i].config);
  }
}

}  // namespace
}  // namespace shardcast
