// Exact distributed evaluation through shardcast-train --eval-only against a real
// shardcast-server serving a named val dataset: the val loss, correct@1, correct@5 and
// count from 2 and from 3 Gloo ranks equal a reference computed in-process without the
// server (the data plane's decode and transform of every val sample once, the same
// model), for a val size that no batch x world divides.
#include <torch/torch.h>

#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/train/evaluator.h"
#include "client/train/model.h"
#include "common/image/image_transform.h"
#include "common/shards/dataset_index.h"
#include "common/shards/shard_reader.h"
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
using testing_util::RunTrainer;
using testing_util::ServerProcess;
using testing_util::TempDir;
using testing_util::TrainerExit;
using testing_util::TrainerFiles;

constexpr int kValSamples = 29;  // prime: no batch x world divides it
constexpr int kClasses = 7;      // more than 5, so top-5 is not trivially every class
constexpr int kImage = 24;       // packed size; served at resize = crop = 16
constexpr int kCrop = 16;
constexpr int kValBatch = 4;

double Field(const std::string& line, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(line, m, std::regex("\"" + name + "\":([-0-9.eE+]+)"))) return -1;
  return std::stod(m[1]);
}

// The "eval" line of a metrics file ("" when there is none).
std::string EvalLine(const std::string& path) {
  std::istringstream lines(ReadWholeFile(path));
  std::string line, found;
  while (std::getline(lines, line)) {
    if (line.find("\"event\":\"eval\"") != std::string::npos) found = line;
  }
  return found;
}

class EvalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    train_ = dir_.path() + "/train";
    val_ = dir_.path() + "/val";
    ASSERT_TRUE(MakeSyntheticShards(train_, 32, kClasses, kImage, /*per_shard=*/16).ok());
    ASSERT_TRUE(MakeSyntheticShards(val_, kValSamples, kClasses, kImage, /*per_shard=*/8).ok());
    server_ = std::make_unique<ServerProcess>(train_, dir_.path());
    absl::Status started =
        server_->Start(0, {"--dataset", "val=" + val_, "--resize", absl::StrCat(kCrop), "--crop",
                           absl::StrCat(kCrop), "--decode-threads", "2"});
    ASSERT_TRUE(started.ok()) << started;

    // A model with weights of its own (not trained: the count of correct answers is
    // what it is, the test compares two ways of counting them).
    ModelSpec spec;
    spec.arch = "small-cnn";
    spec.num_classes = kClasses;
    spec.init_seed = 1234;
    auto model = MakeModel(spec);
    ASSERT_TRUE(model.ok()) << model.status();
    weights_ = dir_.path() + "/model.pt";
    ASSERT_TRUE((*model)->SaveFinal(weights_).ok());
  }
  void TearDown() override {
    if (server_) server_->Kill(SIGTERM);
  }

  // Every val sample once, decoded and transformed by the data plane in-process,
  // normalized as BatchStream does, through the model loaded from weights_.
  EvalSums Reference() {
    ModelSpec spec;
    spec.arch = "small-cnn";
    spec.num_classes = kClasses;
    auto model = MakeModel(spec);
    EXPECT_TRUE(model.ok());
    EXPECT_TRUE(LoadWeights(weights_, **model).ok());
    (*model)->SetTraining(false);
    auto index = BuildDatasetIndex(val_, IndexOptions());
    EXPECT_TRUE(index.ok()) << index.status();
    ShardReader reader(*index);
    TransformSpec transform;
    transform.mode = TransformMode::kCenter;
    transform.resize = kCrop;
    transform.crop = kCrop;
    const torch::Tensor mean = torch::tensor({0.485f, 0.456f, 0.406f}).view({1, 3, 1, 1});
    const torch::Tensor std = torch::tensor({0.229f, 0.224f, 0.225f}).view({1, 3, 1, 1});
    EvalSums sums;
    int64_t seen = 0;
    for (uint32_t s = 0; s < index->shards.size(); ++s) {
      for (const SampleEntry& entry : index->shards[s].samples) {
        auto encoded = reader.ReadMember(s, entry.members[entry.image_member]);
        EXPECT_TRUE(encoded.ok()) << encoded.status();
        torch::Tensor pixels = torch::empty({1, 3, kCrop, kCrop}, torch::kUInt8);
        EXPECT_TRUE(
            DecodeAndTransform(*encoded, transform, /*augment_seed=*/0, pixels.data_ptr<uint8_t>())
                .ok());
        torch::Tensor x = (pixels.to(torch::kFloat32) / 255.0f - mean) / std;
        torch::NoGradGuard no_grad;
        AccumulateEval((*model)->Forward(x), torch::tensor({entry.label}, torch::kLong),
                       torch::ones({1}, torch::kBool), &sums);
        ++seen;
      }
    }
    EXPECT_EQ(seen, kValSamples);
    return sums;
  }

  // shardcast-train --eval-only on `world` local Gloo ranks; rank 0's "eval" line.
  std::string EvalOnly(int world) {
    const TrainerFiles files{dir_.path(), absl::StrCat("eval", world)};
    const std::vector<std::string> flags = {
        "--server",  server_->address(), "--eval-only",
        "--weights", weights_,           "--val-dataset",
        "val",       "--val-batch-size", absl::StrCat(kValBatch),
        "--arch",    "small-cnn",        "--threads",
        "1",         "--no-progress"};
    const TrainerExit exit = RunLocalRanks(world, flags, files, std::chrono::minutes(3));
    EXPECT_TRUE(exit.started.ok()) << exit.started;
    EXPECT_TRUE(exit.code() == 0) << ReadWholeFile(files.err_path());
    EXPECT_NE(ReadWholeFile(files.out_path()).find(absl::StrCat("(", kValSamples, " samples)")),
              std::string::npos)
        << ReadWholeFile(files.out_path());
    return EvalLine(files.metrics_path(0));
  }

  TempDir dir_;
  std::string train_, val_, weights_;
  std::unique_ptr<ServerProcess> server_;
};

// A masked substitute (label -1 on a real sample) is left out of the metrics and counted
// apart from padding (valid false), so exact evaluation can still account for every
// sample (count + substituted = the val set).
TEST(AccumulateEvalTest, MaskedSubstitutesAreCountedApartFromPadding) {
  const torch::Tensor logits = torch::tensor({{5.0f, 0.0f}, {0.0f, 5.0f}, {5.0f, 0.0f}});
  const torch::Tensor labels = torch::tensor({int64_t{0}, int64_t{-1}, int64_t{-1}});
  const torch::Tensor valid = torch::tensor({true, true, false});
  EvalSums sums;
  AccumulateEval(logits, labels, valid, &sums);
  EXPECT_EQ(sums.count, 1);
  EXPECT_EQ(sums.correct1, 1);
  EXPECT_EQ(sums.substituted, 1);  // the second; the third is padding
}

TEST_F(EvalTest, ValMetricsFromTwoAndThreeRanksEqualTheInProcessReference) {
  const EvalSums reference = Reference();
  ASSERT_EQ(reference.count, kValSamples);
  for (int world : {2, 3}) {
    SCOPED_TRACE(absl::StrCat(world, " ranks"));
    // 29 = 3 batches of 4 x 2 ranks + 5, = 2 x 4 x 3 + 5: each world pads the last
    // round, and the padding must not count.
    const std::string line = EvalOnly(world);
    ASSERT_FALSE(line.empty());
    EXPECT_EQ(Field(line, "count"), kValSamples) << line;
    EXPECT_EQ(Field(line, "correct1"), reference.correct1) << line;
    EXPECT_EQ(Field(line, "correct5"), reference.correct5) << line;
    EXPECT_NEAR(Field(line, "loss_sum"), reference.loss_sum, 1e-3 * reference.count) << line;
  }
  // Not a vacuous comparison: some answers right, some wrong at top-5.
  EXPECT_LT(reference.correct5, kValSamples);
  EXPECT_GT(reference.correct5, 0);
}

TEST_F(EvalTest, AValSetWithOtherClassesIsRefused) {
  const std::string other = dir_.path() + "/other";
  ASSERT_TRUE(MakeSyntheticShards(other, 12, kClasses - 2, kImage, 12).ok());
  ServerProcess server(train_, dir_.path());
  ASSERT_TRUE(
      server.Start(0, {"--dataset", "val=" + other, "--resize", "16", "--crop", "16"}).ok());
  const TrainerFiles files{dir_.path(), "refused"};
  const TrainerExit exit =
      RunTrainer({"--server", server.address(), "--val-dataset", "val", "--arch", "small-cnn",
                  "--epochs", "1", "--batch-size", "4", "--threads", "1", "--no-progress"},
                 files.out_path(), files.err_path(), std::chrono::minutes(2));
  server.Kill(SIGTERM);
  ASSERT_TRUE(exit.started.ok()) << exit.started;
  ASSERT_TRUE(exit.wait_status.has_value());
  EXPECT_TRUE(exit.code() == 1) << *exit.wait_status;
  const std::string err = files.err_path();
  EXPECT_NE(ReadWholeFile(err).find("must label the training set's classes"), std::string::npos)
      << ReadWholeFile(err);
}

}  // namespace
}  // namespace shardcast::train
