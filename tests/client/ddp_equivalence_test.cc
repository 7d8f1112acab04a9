// shardcast-train's data parallelism, with real processes over Gloo on loopback: two
// ranks end with identical weights, equal to one process training on both ranks'
// batches with the mean loss; ResNet-18 ranks stay identical; ranks whose batch counts
// differ stop with an error before their first batch instead of hanging.
#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "client/train/batch_source.h"
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
using testing_util::TempDir;

constexpr int kClasses = 4;
constexpr int kBatch = 4;
constexpr int kImage = 16;
constexpr int kSteps = 3;
constexpr uint64_t kSeed = 7;

std::map<std::string, torch::Tensor> ToMap(const NamedTensors& tensors) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& [name, t] : tensors) out[name] = t;
  return out;
}

std::map<std::string, torch::Tensor> LoadModel(const std::string& path) {
  absl::StatusOr<NamedTensors> state = LoadStateDict(path);
  EXPECT_TRUE(state.ok()) << state.status();
  return state.ok() ? ToMap(*state) : std::map<std::string, torch::Tensor>{};
}

std::string ReadFile(const std::string& path) { return testing_util::ReadWholeFile(path); }

// The synthetic job's size: steps per epoch, batch and image size (the defaults are
// what the single-process reference computes).
struct JobShape {
  int steps = kSteps;
  int batch = kBatch;
  int image = kImage;
};

// Runs shardcast-train with 2 local ranks (--nproc-per-node) on synthetic batches;
// every rank saves its final weights to dir/model.<rank>.pt.
void TrainTwoRanks(const std::string& dir, const std::vector<std::string>& extra,
                   const JobShape& shape = {}) {
  std::vector<std::string> argv = {BinaryPath("client/shardcast-train"),
                                   "--synthetic-batches",
                                   absl::StrCat(shape.steps),
                                   "--num-classes",
                                   absl::StrCat(kClasses),
                                   "-b",
                                   absl::StrCat(shape.batch),
                                   "--crop",
                                   absl::StrCat(shape.image),
                                   "--epochs",
                                   "1",
                                   "--seed",
                                   absl::StrCat(kSeed),
                                   "--nproc-per-node",
                                   "2",
                                   "--threads",
                                   "1",
                                   "--no-progress",
                                   "--metrics",
                                   dir + "/metrics.{rank}.jsonl",
                                   "--save",
                                   dir + "/model.{rank}.pt"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  ChildProcess trainer;
  ASSERT_TRUE(trainer.Start(argv, dir + "/train.out", dir + "/train.err").ok());
  std::optional<int> status = trainer.WaitFor(std::chrono::minutes(5));
  ASSERT_TRUE(status.has_value()) << "shardcast-train did not finish in 5 minutes";
  ASSERT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << "status " << *status << ", stderr:\n"
      << ReadFile(dir + "/train.err");
}

// The same job in one process: each step sees both ranks' batches concatenated and
// takes the mean loss over all of them.
std::map<std::string, torch::Tensor> TrainReference(const std::string& optimizer_name) {
  ModelSpec spec;
  spec.arch = "small-cnn";
  spec.num_classes = kClasses;
  spec.init_seed = kSeed;  // rank 0's initialization, which the ranks broadcast
  absl::StatusOr<std::unique_ptr<TrainableModel>> model = MakeModel(spec);
  EXPECT_TRUE(model.ok()) << model.status();
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (optimizer_name == "sgd") {
    optimizer = std::make_unique<torch::optim::SGD>((*model)->Parameters(),
                                                    torch::optim::SGDOptions(0.1).momentum(0));
  } else {
    optimizer = std::make_unique<torch::optim::Adam>(
        (*model)->Parameters(), torch::optim::AdamOptions(1e-2).betas(std::make_tuple(0.9, 0.999)));
  }
  for (int step = 0; step < kSteps; ++step) {
    std::vector<torch::Tensor> images, labels;
    for (int rank = 0; rank < 2; ++rank) {
      SyntheticSpec s;
      s.batches_per_epoch = kSteps;
      s.batch_size = kBatch;
      s.image_size = kImage;
      s.num_classes = kClasses;
      s.seed = kSeed;
      s.rank = rank;
      s.world_size = 2;
      TrainingBatch batch = MakeSyntheticBatch(s, /*epoch=*/0, step);
      images.push_back(batch.images);
      labels.push_back(batch.labels);
    }
    optimizer->zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy((*model)->Forward(torch::cat(images)),
                                                              torch::cat(labels));
    loss.backward();
    optimizer->step();
  }
  return ToMap((*model)->NamedParameters());
}

std::map<std::string, torch::Tensor> InitialSmallCnn() {
  ModelSpec spec;
  spec.arch = "small-cnn";
  spec.num_classes = kClasses;
  spec.init_seed = kSeed;
  return ToMap((*MakeModel(spec))->NamedParameters());
}

void ExpectRanksEqualAndMatchReference(const std::string& dir, const std::string& optimizer) {
  std::map<std::string, torch::Tensor> rank0 = LoadModel(dir + "/model.0.pt");
  std::map<std::string, torch::Tensor> rank1 = LoadModel(dir + "/model.1.pt");
  std::map<std::string, torch::Tensor> reference = TrainReference(optimizer);
  std::map<std::string, torch::Tensor> initial = InitialSmallCnn();
  ASSERT_EQ(rank0.size(), reference.size());
  double moved = 0;
  for (const auto& [name, expected] : reference) {
    ASSERT_TRUE(rank0.count(name) && rank1.count(name)) << name;
    EXPECT_LE((rank0[name] - rank1[name]).abs().max().item<double>(), 1e-6)
        << name << ": the two ranks' weights differ";
    EXPECT_TRUE(torch::allclose(rank0[name], expected, /*rtol=*/1e-4, /*atol=*/1e-5))
        << name << ": DDP result differs from single-process training by "
        << (rank0[name] - expected).abs().max().item<double>();
    moved = std::max(moved, (rank0[name] - initial[name]).abs().max().item<double>());
  }
  EXPECT_GT(moved, 1e-3) << "training did not change the weights";
}

TEST(DdpEquivalenceTest, SgdTwoRanksEqualOneProcessOnConcatenatedBatches) {
  TempDir dir;
  // 1 KiB buckets: several all-reduces per step, each launched from a gradient hook.
  TrainTwoRanks(dir.path(), {"--arch", "small-cnn", "--optimizer", "sgd", "--momentum", "0", "-lr",
                             "0.1", "--bucket-mb", "0.001"});
  ExpectRanksEqualAndMatchReference(dir.path(), "sgd");
  const std::string metrics = ReadFile(dir.path() + "/metrics.0.jsonl");
  // conv1.{weight,bias} | conv2.weight | conv2.bias, fc.{weight,bias} (1 KiB cap, back to
  // front), each launched from the hook of its last gradient, inside backward.
  EXPECT_NE(metrics.find("\"buckets\":3"), std::string::npos) << metrics.substr(0, 600);
  EXPECT_NE(metrics.find("\"buckets_in_backward\":3"), std::string::npos) << metrics.substr(0, 900);
  EXPECT_NE(metrics.find("\"batches_per_rank\":[3,3]"), std::string::npos);
}

TEST(DdpEquivalenceTest, AdamTwoRanksEqualOneProcessOnConcatenatedBatches) {
  TempDir dir;
  TrainTwoRanks(dir.path(), {"--arch", "small-cnn", "--optimizer", "adam", "-lr", "1e-2", "--betas",
                             "0.9", "0.999"});
  ExpectRanksEqualAndMatchReference(dir.path(), "adam");
  EXPECT_NE(ReadFile(dir.path() + "/metrics.1.jsonl").find("\"buckets\":1"), std::string::npos);
}

TEST(DdpEquivalenceTest, ResNet18RanksStayIdentical) {
  TempDir dir;
  TrainTwoRanks(dir.path(), {"--arch", "resnet18", "-lr", "1e-3", "--bucket-mb", "4"},
                JobShape{/*steps=*/2, /*batch=*/2, /*image=*/32});
  std::map<std::string, torch::Tensor> rank0 = LoadModel(dir.path() + "/model.0.pt");
  std::map<std::string, torch::Tensor> rank1 = LoadModel(dir.path() + "/model.1.pt");
  ASSERT_FALSE(rank0.empty());
  ASSERT_EQ(rank0.size(), rank1.size());
  int params = 0;
  for (const auto& [name, t] : rank0) {
    // BatchNorm running statistics last saw each rank's own batch (DDP does not
    // synchronize them after the final forward); parameters must match exactly.
    if (name.find("running_") != std::string::npos ||
        name.find("num_batches") != std::string::npos) {
      continue;
    }
    ++params;
    EXPECT_TRUE(torch::equal(t, rank1[name])) << name << " differs between ranks";
  }
  EXPECT_EQ(params, 62);  // torchvision resnet18 has 62 parameter tensors
  EXPECT_NE(ReadFile(dir.path() + "/metrics.0.jsonl").find("\"model\":\"ResNet-18, 4 classes\""),
            std::string::npos);
}

TEST(DdpEquivalenceTest, RanksWithDifferentBatchCountsStopWithAnError) {
  TempDir dir;
  const int port = FreePort();
  ChildProcess ranks[2];
  for (int rank = 0; rank < 2; ++rank) {
    // Rank 1's source has one batch fewer than rank 0's.
    std::vector<std::string> argv = {BinaryPath("client/shardcast-train"),
                                     "--synthetic-batches",
                                     rank == 0 ? "3" : "2",
                                     "--num-classes",
                                     "4",
                                     "-b",
                                     "2",
                                     "--crop",
                                     "8",
                                     "--arch",
                                     "small-cnn",
                                     "--threads",
                                     "1",
                                     "--no-progress",
                                     "--rank",
                                     absl::StrCat(rank),
                                     "--world-size",
                                     "2",
                                     "--master-port",
                                     absl::StrCat(port),
                                     "--rendezvous-timeout",
                                     "60s"};
    ASSERT_TRUE(ranks[rank]
                    .Start(argv, absl::StrCat(dir.path(), "/r", rank, ".out"),
                           absl::StrCat(dir.path(), "/r", rank, ".err"))
                    .ok());
  }
  for (int rank = 0; rank < 2; ++rank) {
    std::optional<int> status = ranks[rank].WaitFor(std::chrono::minutes(3));
    ASSERT_TRUE(status.has_value()) << "rank " << rank << " hung";
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) != 0) << "rank " << rank;
  }
  // Found before the first batch (Trainer::AgreeOnJob), by both ranks: no batch of
  // the epoch is trained on before the counts are compared.
  for (int rank = 0; rank < 2; ++rank) {
    const std::string err = ReadFile(absl::StrCat(dir.path(), "/r", rank, ".err"));
    EXPECT_NE(err.find("batches per epoch: rank 0 has 3, rank 1 has 2"), std::string::npos) << err;
  }
}

}  // namespace
}  // namespace shardcast::train
