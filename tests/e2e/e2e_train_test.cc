// End to end with real processes: shardcast-server + `shardcast-train --nproc-per-node 2`
// (two Gloo ranks) on a small synthetic dataset. Loss falls, every rank consumes exactly
// n batches per epoch, and the samples are the plan's — also when the server is killed
// mid-epoch and restarted on the same port.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/rpc/channel.h"
#include "common/plan/epoch_plan.h"
#include "common/shards/dataset_index.h"
#include "shardcast/v1/shardcast.grpc.pb.h"
#include "tests/support/child_process.h"
#include "tests/support/server_process.h"
#include "tests/support/temp_dir.h"

namespace shardcast {
namespace {

using testing_util::BinaryPath;
using testing_util::ChildProcess;
using testing_util::MakeSyntheticShards;
using testing_util::ReadWholeFile;
using testing_util::ServerProcess;
using testing_util::TempDir;
namespace v1 = ::shardcast::v1;

constexpr int64_t kSamples = 512;
constexpr int kClasses = 4;
constexpr int kBatch = 16;
constexpr int kWorld = 2;
constexpr int kEpochs = 2;
constexpr uint64_t kSeed = 3;
constexpr int64_t kN = kSamples / (kBatch * kWorld);  // 16 batches per rank per epoch

// One "step" line of a rank's metrics file.
struct Step {
  int64_t epoch = -1;
  int64_t batch = -1;
  double loss = 0;
  std::vector<std::string> keys;
};

struct RankMetrics {
  std::vector<Step> steps;
  std::vector<std::string> epoch_lines;  // raw "epoch" events
  bool ended = false;
};

// The raw JSON value of `name` in a one-line object written by shardcast-train: a
// string (with its quotes), an array (with its brackets) or a number.
std::string Field(const std::string& line, const std::string& name) {
  const std::string tag = "\"" + name + "\":";
  const size_t at = line.find(tag);
  if (at == std::string::npos) return "";
  const size_t begin = at + tag.size();
  size_t end = begin;
  if (begin < line.size() && line[begin] == '"') {
    end = line.find('"', begin + 1) + 1;
  } else if (begin < line.size() && line[begin] == '[') {
    end = line.find(']', begin) + 1;
  } else {
    end = line.find_first_of(",}", begin);
  }
  if (end == std::string::npos || end == 0) return "";
  return line.substr(begin, end - begin);
}

RankMetrics ParseMetrics(const std::string& path) {
  RankMetrics out;
  std::istringstream lines(ReadWholeFile(path));
  std::string line;
  while (std::getline(lines, line)) {
    const std::string event = Field(line, "event");
    if (event == "\"step\"") {
      Step s;
      s.epoch = std::stoll(Field(line, "epoch"));
      s.batch = std::stoll(Field(line, "batch"));
      s.loss = std::stod(Field(line, "loss"));
      std::string keys = Field(line, "keys");
      if (keys.size() >= 2) {
        for (absl::string_view k : absl::StrSplit(keys.substr(1, keys.size() - 2), ',')) {
          if (k.size() >= 2) s.keys.emplace_back(k.substr(1, k.size() - 2));
        }
      }
      out.steps.push_back(std::move(s));
    } else if (event == "\"epoch\"") {
      out.epoch_lines.push_back(line);
    } else if (event == "\"end\"") {
      out.ended = true;
    }
  }
  return out;
}

class E2ETrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(scratch_.path().empty());
    shards_ = scratch_.path() + "/shards";
    ASSERT_TRUE(MakeSyntheticShards(shards_, kSamples, kClasses, 32, 64).ok());
    server_ = std::make_unique<ServerProcess>(shards_, scratch_.path());
    absl::Status started = server_->Start();
    ASSERT_TRUE(started.ok()) << started;
  }

  std::string MetricsPattern(const std::string& job) const {
    return absl::StrCat(scratch_.path(), "/", job, "-{rank}.jsonl");
  }
  std::string MetricsPath(const std::string& job, int rank) const {
    return absl::StrCat(scratch_.path(), "/", job, "-", rank, ".jsonl");
  }

  void StartTrainer(const std::string& job, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {BinaryPath("client/shardcast-train"),
                                     "--server",
                                     server_->address(),
                                     "--job-id",
                                     job,
                                     "--nproc-per-node",
                                     "2",
                                     "-b",
                                     std::to_string(kBatch),
                                     "--n_epochs",
                                     std::to_string(kEpochs),
                                     "--split",
                                     "sample",
                                     "--seed",
                                     std::to_string(kSeed),
                                     "--resize",
                                     "32",
                                     "--crop",
                                     "32",
                                     "--lr",
                                     "1e-3",
                                     "--threads",
                                     "1",
                                     "--metrics",
                                     MetricsPattern(job),
                                     "--log-keys",
                                     "--no-progress"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    ASSERT_TRUE(
        trainer_
            .Start(argv, scratch_.path() + "/" + job + ".out", scratch_.path() + "/" + job + ".err")
            .ok());
  }

  // Waits for the trainer; returns its wait status.
  int WaitTrainer() {
    std::optional<int> status = trainer_.WaitFor(std::chrono::seconds(300));
    if (!status) {
      ADD_FAILURE() << "shardcast-train still running after 300 s";
      return trainer_.Kill(SIGTERM);  // the launcher forwards it to its ranks
    }
    return *status;
  }

  // The keys the plan says batch `batch` of `rank` holds in `epoch`.
  std::map<std::tuple<int64_t, int, int64_t>, std::vector<std::string>> PlannedKeys() {
    std::map<std::tuple<int64_t, int, int64_t>, std::vector<std::string>> out;
    absl::StatusOr<DatasetIndex> index = BuildDatasetIndex(shards_, IndexOptions{});
    EXPECT_TRUE(index.ok()) << index.status();
    if (!index.ok()) return out;
    PlanConfig config;
    config.world_size = kWorld;
    config.batch_size = kBatch;
    config.split = Split::kSample;
    config.remainder = Remainder::kDrop;
    config.seed = kSeed;
    for (int64_t epoch = 0; epoch < kEpochs; ++epoch) {
      auto plan = EpochPlan::Create(index->ShardSampleCounts(), config, epoch);
      EXPECT_TRUE(plan.ok()) << plan.status();
      if (!plan.ok()) return out;
      EXPECT_EQ((*plan)->batches_per_rank(), kN);
      for (int rank = 0; rank < kWorld; ++rank) {
        auto it = (*plan)->Iterate(rank, 0);
        PlannedBatch b;
        while (it->Next(&b)) {
          std::vector<std::string>& keys = out[{epoch, rank, b.index}];
          for (const SampleRef& s : b.samples)
            keys.push_back(index->shards[s.shard].samples[s.index].key);
        }
      }
    }
    return out;
  }

  // Every rank: exactly n steps per epoch with batches 0..n-1 in order, the plan's
  // keys, an "epoch" line saying every rank consumed n; returns mean loss per epoch.
  std::vector<double> CheckRun(const std::string& job) {
    auto planned = PlannedKeys();
    std::vector<double> loss_sum(kEpochs, 0.0);
    for (int rank = 0; rank < kWorld; ++rank) {
      RankMetrics m = ParseMetrics(MetricsPath(job, rank));
      EXPECT_TRUE(m.ended) << "rank " << rank << " did not finish";
      EXPECT_EQ(static_cast<int64_t>(m.steps.size()), kEpochs * kN) << "rank " << rank;
      std::map<int64_t, int64_t> next_batch;
      for (const Step& s : m.steps) {
        EXPECT_EQ(s.batch, next_batch[s.epoch]++)
            << "rank " << rank << " epoch " << s.epoch << ": batches out of order or repeated";
        EXPECT_EQ(s.keys.size(), static_cast<size_t>(kBatch));
        EXPECT_EQ(s.keys, (planned[{s.epoch, rank, s.batch}]))
            << "rank " << rank << " epoch " << s.epoch << " batch " << s.batch;
        if (s.epoch >= 0 && s.epoch < kEpochs) loss_sum[s.epoch] += s.loss;
      }
      for (int64_t e = 0; e < kEpochs; ++e) {
        EXPECT_EQ(next_batch[e], kN) << "rank " << rank << " epoch " << e;
      }
      EXPECT_EQ(m.epoch_lines.size(), static_cast<size_t>(kEpochs)) << "rank " << rank;
      for (const std::string& line : m.epoch_lines) {
        EXPECT_EQ(Field(line, "n"), std::to_string(kN)) << line;
        EXPECT_EQ(Field(line, "batches_per_rank"), absl::StrCat("[", kN, ",", kN, "]")) << line;
      }
    }
    std::vector<double> mean;
    for (double s : loss_sum) mean.push_back(s / (kWorld * kN));
    return mean;
  }

  TempDir scratch_;
  std::string shards_;
  std::unique_ptr<ServerProcess> server_;
  ChildProcess trainer_;
};

TEST_F(E2ETrainTest, TwoRanksTwoEpochsLossFallsExactlyNBatchesEach) {
  StartTrainer("e2e");
  const int status = WaitTrainer();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "shardcast-train failed (" << status << "):\n"
      << ReadWholeFile(scratch_.path() + "/e2e.err");
  std::vector<double> loss = CheckRun("e2e");
  ASSERT_EQ(loss.size(), 2u);
  EXPECT_LT(loss[1], loss[0]) << "mean loss did not fall: epoch 0 " << loss[0] << ", epoch 1 "
                              << loss[1];
  // 4 classes: chance is ln 4 = 1.39; the data is learnable within two short epochs.
  EXPECT_LT(loss[1], 1.0);
}

// --decode cpu: the server sends the JPEGs as stored with their crops and each rank
// decodes them; the pixels are server delivery's, so the same run (same seed, one
// thread per rank) takes the same steps to the same losses, bit for bit.
TEST_F(E2ETrainTest, DecodingOnTheTrainersCpuTrainsAsServerDelivery) {
  std::map<std::string, std::vector<double>> step_losses;
  for (const std::string job : {"served", "decoded"}) {
    StartTrainer(job, job == "decoded" ? std::vector<std::string>{"--decode", "cpu"}
                                       : std::vector<std::string>{});
    const int status = WaitTrainer();
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "shardcast-train failed (" << status << "):\n"
        << ReadWholeFile(scratch_.path() + "/" + job + ".err");
    CheckRun(job);
    for (int rank = 0; rank < kWorld; ++rank) {
      for (const Step& s : ParseMetrics(MetricsPath(job, rank)).steps) {
        step_losses[job].push_back(s.loss);
      }
    }
  }
  EXPECT_EQ(step_losses["decoded"], step_losses["served"]);
}

// Tried as a new user would: run the trainer, then run it again with another batch
// size against the same server, no --job-id either time. Before, both runs were job
// "default" and the second was refused (FAILED_PRECONDITION batch_size) until the
// server restarted; now each run is its own job, named by its rank 0.
TEST_F(E2ETrainTest, RerunWithOtherFlagsIsANewJobNotAConflict) {
  for (const char* batch : {"16", "8"}) {
    const testing_util::CommandOutput run = testing_util::RunShellCapture(
        testing_util::ShellCommand({BinaryPath("client/shardcast-train"), "--server",
                                    server_->address(), "--nproc-per-node", "2", "-b", batch,
                                    "--resize", "32", "--crop", "32", "--arch", "small-cnn",
                                    "--max-steps", "2", "--threads", "1", "--no-progress"}) +
        " 2>&1");
    ASSERT_EQ(run.exit_code, 0) << "-b " << batch << ":\n" << run.out;
  }
  client::ChannelOptions channel;
  channel.target = server_->address();
  auto stub = v1::Shardcast::NewStub(client::MakeChannel(channel));
  grpc::ClientContext context;
  v1::GetStatusResponse status;
  ASSERT_TRUE(stub->GetStatus(&context, v1::GetStatusRequest(), &status).ok());
  ASSERT_EQ(status.jobs_size(), 2);
  std::set<int32_t> batch_sizes;
  for (const v1::JobStatus& job : status.jobs()) {
    EXPECT_EQ(job.job_id().rfind("run-", 0), 0u) << job.job_id();
    EXPECT_EQ(job.ranks_size(), 2) << job.job_id();  // both ranks agreed on the name
    batch_sizes.insert(job.batch_size());
  }
  EXPECT_EQ(batch_sizes, (std::set<int32_t>{8, 16}));
}

TEST_F(E2ETrainTest, ServerKilledMidEpochAndRestartedOnSamePortRanksFinish) {
  StartTrainer("restart");
  // Wait until rank 0 has trained a step of epoch 0, then kill the server hard.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  bool stepped = false;
  while (std::chrono::steady_clock::now() < until && !stepped) {
    stepped = !ParseMetrics(MetricsPath("restart", 0)).steps.empty();
    if (!stepped) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(stepped) << ReadWholeFile(scratch_.path() + "/restart.err");
  const int port = server_->port();
  server_->Kill(SIGKILL);
  const int64_t steps_at_kill = ParseMetrics(MetricsPath("restart", 0)).steps.size();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  absl::Status restarted = server_->Start(port);
  ASSERT_TRUE(restarted.ok()) << restarted;

  const int status = WaitTrainer();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "shardcast-train failed (" << status << "):\n"
      << ReadWholeFile(scratch_.path() + "/restart.err");
  EXPECT_LT(steps_at_kill, kN) << "the kill was meant to land in epoch 0";
  CheckRun("restart");
  // Both ranks came back to the new server (it had never heard of the job).
  const std::string log = server_->Stderr();
  for (int rank = 0; rank < kWorld; ++rank) {
    EXPECT_NE(log.find(absl::StrCat("job 'restart' rank ", rank, "/2")), std::string::npos)
        << "rank " << rank << " did not re-register with the restarted server:\n"
        << log;
  }
}

}  // namespace
}  // namespace shardcast
