// shardcast-train against a real shardcast-server (both real processes, loopback):
// two ranks train two epochs (loss falls, n batches per rank, every sample once per
// epoch); a rank killed mid-epoch resumes from its checkpoint with exactly the planned
// batches and ends with the uninterrupted run's weights; a server killed and restarted
// mid-epoch is reconnected to and training finishes with n batches per rank.
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/train/model.h"
#include "gtest/gtest.h"
#include "tests/support/child_process.h"
#include "tests/support/free_port.h"
#include "tests/support/server_process.h"
#include "tests/support/temp_dir.h"

namespace shardcast::train {
namespace {

using testing_util::BinaryPath;
using testing_util::ChildProcess;
using testing_util::FreePort;
using testing_util::MakeSyntheticShards;
using testing_util::ReadWholeFile;
using testing_util::ServerProcess;
using testing_util::TempDir;

constexpr int kSamples = 256;
constexpr int kBatch = 2;
constexpr int kWorld = 2;
constexpr int kEpochs = 2;
constexpr int kBatchesPerEpoch = kSamples / (kBatch * kWorld);  // 64

// One "step" line of a metrics file.
struct Step {
  int64_t epoch, batch, step;
  std::vector<std::string> keys;
};

// A metrics file split into runs: every "start" event begins a new run.
struct MetricsRun {
  int64_t start_epoch = -1, start_batch = -1, start_step = -1;
  std::vector<Step> steps;
  std::vector<std::string> epoch_lines;
  bool ended = false;
};

int64_t IntField(const std::string& line, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(line, m, std::regex("\"" + name + "\":(-?\\d+)"))) return -1;
  return std::stoll(m[1]);
}

std::vector<MetricsRun> ReadRuns(const std::string& path) {
  std::vector<MetricsRun> runs;
  std::istringstream lines(ReadWholeFile(path));
  std::string line;
  static const std::regex keys_re("\"keys\":\\[([^\\]]*)\\]");
  while (std::getline(lines, line)) {
    if (line.find("\"event\":\"start\"") != std::string::npos) {
      runs.emplace_back();
      runs.back().start_epoch = IntField(line, "epoch");
      runs.back().start_batch = IntField(line, "next_batch");
      runs.back().start_step = IntField(line, "step");
    } else if (runs.empty()) {
      continue;
    } else if (line.find("\"event\":\"step\"") != std::string::npos) {
      Step s{IntField(line, "epoch"), IntField(line, "batch"), IntField(line, "step"), {}};
      std::smatch m;
      if (std::regex_search(line, m, keys_re)) {
        for (absl::string_view k : absl::StrSplit(std::string(m[1]), ',', absl::SkipEmpty())) {
          s.keys.emplace_back(std::string(k.substr(1, k.size() - 2)));  // strip the quotes
        }
      }
      runs.back().steps.push_back(std::move(s));
    } else if (line.find("\"event\":\"epoch\"") != std::string::npos) {
      runs.back().epoch_lines.push_back(line);
    } else if (line.find("\"event\":\"end\"") != std::string::npos) {
      runs.back().ended = true;
    }
  }
  return runs;
}

size_t CountSteps(const std::string& metrics_path) {
  size_t steps = 0;
  for (const MetricsRun& run : ReadRuns(metrics_path)) steps += run.steps.size();
  return steps;
}

double DoubleField(const std::string& line, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(line, m, std::regex("\"" + name + "\":([-0-9.eE+]+)"))) return -1;
  return std::stod(m[1]);
}

// Every epoch line says each of the kWorld ranks ran all kBatchesPerEpoch batches.
void ExpectFullEpochs(const std::vector<std::string>& epoch_lines) {
  for (const std::string& line : epoch_lines) {
    EXPECT_NE(line.find(absl::StrFormat("\"batches_per_rank\":[%d,%d]", kBatchesPerEpoch,
                                        kBatchesPerEpoch)),
              std::string::npos)
        << line;
  }
}

class TrainResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shards_ = dir_.path() + "/shards";
    ASSERT_TRUE(MakeSyntheticShards(shards_, kSamples, /*num_classes=*/4, /*size=*/32,
                                    /*per_shard=*/32)
                    .ok());
    server_ = std::make_unique<ServerProcess>(shards_, dir_.path());
    absl::Status started = server_->Start(0, {"--resize", "32", "--crop", "32"});
    ASSERT_TRUE(started.ok()) << started;
  }
  void TearDown() override {
    if (server_) server_->Kill(SIGTERM);
  }

  // The job: exactly-once split with a seeded permutation, so the key sequence is
  // not simply file order; Adam, whose state must survive the restart. The small CNN
  // keeps the test fast (ResNet-18's DDP behaviour is covered by ddp_equivalence_test).
  std::vector<std::string> RankArgs(const std::string& job, const std::string& tag, int rank,
                                    int port, const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {BinaryPath("client/shardcast-train"),
                                     "--server",
                                     server_->address(),
                                     "--job-id",
                                     job,
                                     "-b",
                                     absl::StrCat(kBatch),
                                     "--epochs",
                                     absl::StrCat(kEpochs),
                                     "--split",
                                     "sample",
                                     "--seed",
                                     "3",
                                     "--arch",
                                     "small-cnn",
                                     "-lr",
                                     "3e-3",
                                     "--threads",
                                     "1",
                                     "--no-progress",
                                     "--log-keys",
                                     "--metrics",
                                     dir_.path() + "/" + tag + ".{rank}.jsonl",
                                     "--save",
                                     dir_.path() + "/" + tag + ".{rank}.pt",
                                     "--rank",
                                     absl::StrCat(rank),
                                     "--world-size",
                                     absl::StrCat(kWorld),
                                     "--master-port",
                                     absl::StrCat(port),
                                     "--rendezvous-timeout",
                                     "60s"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }

  void StartRanks(ChildProcess (&ranks)[kWorld], const std::string& job, const std::string& tag,
                  const std::vector<std::string>& extra) {
    const int port = FreePort();
    for (int r = 0; r < kWorld; ++r) {
      ASSERT_TRUE(ranks[r]
                      .Start(RankArgs(job, tag, r, port, extra),
                             absl::StrCat(dir_.path(), "/", tag, ".", r, ".out"),
                             absl::StrCat(dir_.path(), "/", tag, ".", r, ".err"))
                      .ok());
    }
  }

  void ExpectAllSucceed(ChildProcess (&ranks)[kWorld], const std::string& tag) {
    for (int r = 0; r < kWorld; ++r) {
      std::optional<int> status = ranks[r].WaitFor(std::chrono::minutes(5));
      ASSERT_TRUE(status.has_value()) << tag << " rank " << r << " did not finish";
      EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
          << tag << " rank " << r << " status " << *status << ":\n"
          << ReadWholeFile(absl::StrCat(dir_.path(), "/", tag, ".", r, ".err"));
    }
  }

  // Every sample of the dataset exactly once per epoch over all ranks (split sample,
  // N divisible by B*W), with n batches on each rank.
  void ExpectExactlyOncePerEpoch(const std::string& tag) {
    for (int epoch = 0; epoch < kEpochs; ++epoch) {
      std::set<std::string> seen;
      size_t served = 0;
      for (int r = 0; r < kWorld; ++r) {
        size_t batches = 0;
        for (const MetricsRun& run :
             ReadRuns(absl::StrCat(dir_.path(), "/", tag, ".", r, ".jsonl"))) {
          for (const Step& s : run.steps) {
            if (s.epoch != epoch) continue;
            ++batches;
            served += s.keys.size();
            seen.insert(s.keys.begin(), s.keys.end());
          }
        }
        EXPECT_EQ(batches, static_cast<size_t>(kBatchesPerEpoch))
            << "rank " << r << " epoch " << epoch;
      }
      EXPECT_EQ(served, static_cast<size_t>(kSamples)) << "epoch " << epoch;
      EXPECT_EQ(seen.size(), static_cast<size_t>(kSamples)) << "epoch " << epoch;
    }
  }

  TempDir dir_;
  std::string shards_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(TrainResumeTest, TwoRanksTwoEpochsLossFallsAndEachRankGetsNBatches) {
  // --nproc-per-node: the trainer starts both ranks itself.
  std::vector<std::string> argv = RankArgs("e2e", "e2e", 0, FreePort(), {});
  argv.resize(argv.size() - 8);  // drop --rank/--world-size/--master-port/--rendezvous-timeout
  argv.insert(argv.end(), {"--nproc-per-node", "2"});
  argv.erase(std::find(argv.begin(), argv.end(), "--no-progress"));
  ChildProcess launcher;
  ASSERT_TRUE(launcher.Start(argv, dir_.path() + "/e2e.out", dir_.path() + "/e2e.err").ok());
  std::optional<int> status = launcher.WaitFor(std::chrono::minutes(5));
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << ReadWholeFile(dir_.path() + "/e2e.err");
  for (int r = 0; r < kWorld; ++r) {
    std::vector<MetricsRun> runs = ReadRuns(absl::StrCat(dir_.path(), "/e2e.", r, ".jsonl"));
    ASSERT_EQ(runs.size(), 1u);
    ASSERT_EQ(runs[0].epoch_lines.size(), static_cast<size_t>(kEpochs));
    ExpectFullEpochs(runs[0].epoch_lines);
    const double loss0 = DoubleField(runs[0].epoch_lines[0], "loss");
    const double loss1 = DoubleField(runs[0].epoch_lines[1], "loss");
    EXPECT_LT(loss1, 0.8 * loss0) << "loss did not fall: " << loss0 << " -> " << loss1;
    EXPECT_GT(DoubleField(runs[0].epoch_lines[1], "acc"), 0.5);  // chance is 0.25
  }
  ExpectExactlyOncePerEpoch("e2e");
  // Rank 0 drew the progress bar (plain lines: stderr is a file here).
  EXPECT_NE(
      ReadWholeFile(dir_.path() + "/e2e.err").find("epoch 2/2 [########################] 64/64"),
      std::string::npos)
      << ReadWholeFile(dir_.path() + "/e2e.err");
}

TEST_F(TrainResumeTest, ServerKilledAndRestartedMidEpochRanksReconnectAndFinish) {
  const int port = server_->port();
  ChildProcess ranks[kWorld];
  StartRanks(ranks, "restart", "srv", {});
  const auto until = std::chrono::steady_clock::now() + std::chrono::minutes(3);
  while (CountSteps(dir_.path() + "/srv.0.jsonl") < 5 && std::chrono::steady_clock::now() < until) {
    ASSERT_FALSE(ranks[0].WaitFor(std::chrono::milliseconds(5)).has_value())
        << ReadWholeFile(dir_.path() + "/srv.0.err");
  }
  server_->Kill(SIGKILL);
  const size_t steps_at_kill = CountSteps(dir_.path() + "/srv.0.jsonl");
  ASSERT_LT(steps_at_kill, static_cast<size_t>(kEpochs * kBatchesPerEpoch / 2))
      << "the server was killed too late to interrupt epoch 0";
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  absl::Status restarted = server_->Start(port, {"--resize", "32", "--crop", "32"});
  ASSERT_TRUE(restarted.ok()) << restarted;
  ExpectAllSucceed(ranks, "srv");
  for (int r = 0; r < kWorld; ++r) {
    std::vector<MetricsRun> runs = ReadRuns(absl::StrCat(dir_.path(), "/srv.", r, ".jsonl"));
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_TRUE(runs[0].ended);
    ASSERT_EQ(runs[0].epoch_lines.size(), static_cast<size_t>(kEpochs));
    ExpectFullEpochs(runs[0].epoch_lines);
  }
  ExpectExactlyOncePerEpoch("srv");
}

TEST_F(TrainResumeTest, KilledRankResumesWithThePlannedBatches) {
  // 1. The uninterrupted run: the reference sequence of keys and final weights.
  {
    ChildProcess ranks[kWorld];
    StartRanks(ranks, "reference", "ref", {});
    ExpectAllSucceed(ranks, "ref");
  }
  std::map<std::tuple<int, int64_t, int64_t>, std::vector<std::string>> planned;
  for (int r = 0; r < kWorld; ++r) {
    std::vector<MetricsRun> runs = ReadRuns(absl::StrCat(dir_.path(), "/ref.", r, ".jsonl"));
    ASSERT_EQ(runs.size(), 1u);
    ASSERT_EQ(runs[0].steps.size(), static_cast<size_t>(kEpochs * kBatchesPerEpoch));
    for (const Step& s : runs[0].steps) {
      ASSERT_EQ(s.keys.size(), static_cast<size_t>(kBatch));
      planned[{r, s.epoch, s.batch}] = s.keys;
    }
  }

  // 2. The same job with checkpoints every 5 steps; SIGKILL rank 1 right after the
  //    first checkpoint appears (mid-epoch 0). Rank 0 then fails: its peer is gone.
  const std::string ckpt_dir = dir_.path() + "/ckpt";
  const std::vector<std::string> ckpt_flags = {"--ckpt-dir", ckpt_dir, "--ckpt-every", "5"};
  {
    ChildProcess ranks[kWorld];
    StartRanks(ranks, "job", "run", ckpt_flags);
    const auto until = std::chrono::steady_clock::now() + std::chrono::minutes(3);
    while (!std::filesystem::exists(ckpt_dir + "/latest") &&
           std::chrono::steady_clock::now() < until) {
      ASSERT_FALSE(ranks[0].WaitFor(std::chrono::milliseconds(5)).has_value())
          << "rank 0 exited before checkpointing:\n"
          << ReadWholeFile(dir_.path() + "/run.0.err");
    }
    ASSERT_TRUE(std::filesystem::exists(ckpt_dir + "/latest")) << "no checkpoint in 3 minutes";
    const int killed = ranks[1].Kill(SIGKILL);
    ASSERT_TRUE(WIFSIGNALED(killed) && WTERMSIG(killed) == SIGKILL)
        << "rank 1 had already exited (status " << killed << ")";
    std::optional<int> survivor = ranks[0].WaitFor(std::chrono::seconds(90));
    ASSERT_TRUE(survivor.has_value()) << "rank 0 hung after its peer was killed";
    EXPECT_TRUE(WIFEXITED(*survivor) && WEXITSTATUS(*survivor) != 0);
  }
  std::vector<MetricsRun> before = ReadRuns(dir_.path() + "/run.1.jsonl");
  ASSERT_EQ(before.size(), 1u);
  EXPECT_FALSE(before[0].ended);
  ASSERT_LT(before[0].steps.size(), static_cast<size_t>(kEpochs * kBatchesPerEpoch))
      << "the kill came too late to interrupt training";
  const std::string latest = ReadWholeFile(ckpt_dir + "/latest");

  // 3. Restart every rank from the checkpoint directory (its latest checkpoint).
  {
    ChildProcess ranks[kWorld];
    StartRanks(ranks, "job", "run", {"--resume", ckpt_dir, "--ckpt-dir", ckpt_dir});
    ExpectAllSucceed(ranks, "resume");
  }

  // 4. After the restart each rank trained on exactly the planned batches from the
  //    checkpoint's position to the end, and every epoch was n batches on every rank.
  for (int r = 0; r < kWorld; ++r) {
    std::vector<MetricsRun> runs = ReadRuns(absl::StrCat(dir_.path(), "/run.", r, ".jsonl"));
    ASSERT_EQ(runs.size(), 2u) << "rank " << r;
    const MetricsRun& first = runs[0];
    const MetricsRun& resumed = runs[1];
    EXPECT_TRUE(resumed.ended);
    // The checkpoint named in `latest` is where the resumed run starts.
    EXPECT_NE(latest.find(
                  absl::StrFormat("ckpt-e%04d-b%06d.pt", resumed.start_epoch, resumed.start_batch)),
              std::string::npos)
        << latest;
    EXPECT_EQ(resumed.start_step % 5, 0);
    EXPECT_GT(resumed.start_step, 0);
    for (const Step& s : first.steps) {
      EXPECT_EQ(s.keys, (planned[{r, s.epoch, s.batch}])) << "before kill, rank " << r;
    }
    int64_t epoch = resumed.start_epoch, batch = resumed.start_batch, step = resumed.start_step;
    for (const Step& s : resumed.steps) {
      if (batch == kBatchesPerEpoch) {
        ++epoch;
        batch = 0;
      }
      ASSERT_EQ(std::make_pair(s.epoch, s.batch), std::make_pair(epoch, batch)) << "rank " << r;
      EXPECT_EQ(s.step, ++step);
      EXPECT_EQ(s.keys, (planned[{r, epoch, batch}]))
          << "rank " << r << " epoch " << epoch << " batch " << batch;
      ++batch;
    }
    EXPECT_EQ(epoch, kEpochs - 1);
    EXPECT_EQ(batch, kBatchesPerEpoch);
    EXPECT_EQ(step, kEpochs * kBatchesPerEpoch);
    ASSERT_FALSE(resumed.epoch_lines.empty());
    ExpectFullEpochs(resumed.epoch_lines);
  }

  // 5. Same batches, same restored model and optimizer state: same final weights.
  absl::StatusOr<NamedTensors> reference = LoadStateDict(dir_.path() + "/ref.0.pt");
  absl::StatusOr<NamedTensors> resumed = LoadStateDict(dir_.path() + "/run.0.pt");
  ASSERT_TRUE(reference.ok() && resumed.ok());
  ASSERT_EQ(reference->size(), resumed->size());
  for (size_t i = 0; i < reference->size(); ++i) {
    const auto& [name, expected] = (*reference)[i];
    EXPECT_EQ(name, (*resumed)[i].first);
    if (!expected.is_floating_point()) continue;
    EXPECT_TRUE(torch::allclose((*resumed)[i].second, expected, /*rtol=*/1e-4, /*atol=*/1e-5))
        << name << " differs by " << ((*resumed)[i].second - expected).abs().max().item<double>();
  }
}

}  // namespace
}  // namespace shardcast::train
