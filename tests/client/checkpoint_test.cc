// Checkpoints: a round trip restores weights, buffers, optimizer state and position;
// unreadable, foreign or mismatched checkpoints are refused with messages naming the
// file and the problem; the checkpoint directory keeps the newest N and a `latest`
// pointer; shardcast-train refuses to resume under a different job configuration.
#include "client/train/checkpoint.h"

#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "client/train/model.h"
#include "gtest/gtest.h"
#include "tests/support/child_process.h"
#include "tests/support/server_process.h"
#include "tests/support/temp_dir.h"

namespace shardcast::train {
namespace {

using testing_util::BinaryPath;
using testing_util::ChildProcess;
using testing_util::ReadWholeFile;
using testing_util::TempDir;

std::unique_ptr<TrainableModel> Model(const std::string& arch, int64_t classes, uint64_t seed) {
  ModelSpec spec;
  spec.arch = arch;
  spec.num_classes = classes;
  spec.init_seed = seed;
  return std::move(*MakeModel(spec));
}

std::unique_ptr<torch::optim::Adam> AdamFor(TrainableModel& model) {
  return std::make_unique<torch::optim::Adam>(model.Parameters(), torch::optim::AdamOptions(1e-2));
}

void TrainOneStep(TrainableModel& model, torch::optim::Optimizer& optimizer) {
  optimizer.zero_grad();
  torch::Tensor loss = torch::nn::functional::cross_entropy(
      model.Forward(torch::randn({4, 3, 32, 32})), torch::tensor({0, 1, 2, 3}));
  loss.backward();
  optimizer.step();
}

TEST(CheckpointTest, RoundTripRestoresModelOptimizerAndPosition) {
  TempDir dir;
  const std::string path = dir.path() + "/c.pt";
  std::unique_ptr<TrainableModel> a = Model("resnet18", 4, 1);
  auto opt_a = AdamFor(*a);
  TrainOneStep(*a, *opt_a);
  CheckpointPosition saved{/*epoch=*/2,        /*next_batch=*/17,
                           /*global_step=*/81, /*world_size=*/2,
                           /*batch_size=*/8,   "plan-abc"};
  ASSERT_TRUE(SaveCheckpoint(path, *a, *opt_a, saved).ok());

  std::unique_ptr<TrainableModel> b = Model("resnet18", 4, 2);  // different init
  auto opt_b = AdamFor(*b);
  absl::StatusOr<CheckpointPosition> loaded = LoadCheckpoint(path, *b, *opt_b, torch::kCPU);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->epoch, 2);
  EXPECT_EQ(loaded->next_batch, 17);
  EXPECT_EQ(loaded->global_step, 81);
  EXPECT_EQ(loaded->world_size, 2);
  EXPECT_EQ(loaded->batch_size, 8);
  EXPECT_EQ(loaded->fingerprint, "plan-abc");
  NamedTensors pa = a->NamedParameters(), pb = b->NamedParameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i].second, pb[i].second));
  NamedTensors ba = a->NamedBuffers(), bb = b->NamedBuffers();
  ASSERT_EQ(ba.size(), 60u);  // running_mean/var + num_batches_tracked of 20 BNs
  for (size_t i = 0; i < ba.size(); ++i) EXPECT_TRUE(torch::equal(ba[i].second, bb[i].second));
  // The same next step from both: only equal if Adam's moments and step count came back.
  torch::manual_seed(9);
  TrainOneStep(*a, *opt_a);
  torch::manual_seed(9);
  TrainOneStep(*b, *opt_b);
  pa = a->NamedParameters();
  pb = b->NamedParameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(torch::allclose(pa[i].second, pb[i].second, 1e-5, 1e-6)) << pa[i].first;
  }
}

TEST(CheckpointTest, AMixedRunsFactsRoundTripAndAreAbsentFromOthers) {
  TempDir dir;
  std::unique_ptr<TrainableModel> cnn = Model("small-cnn", 4, 1);
  auto opt = AdamFor(*cnn);
  CheckpointPosition saved;
  saved.epoch = 1;
  saved.next_batch = 3;
  saved.batches_in_epoch = 12;
  saved.mix.segments = {{0, 0, 8}, {24, 3, 4}};
  // Weights that no short decimal spells: they come back bit for bit.
  saved.mix.schedule = {{0, {{"a", 1.0 / 3}, {"b", 2.0 / 3}}}, {4, {{"a", 0.2}, {"b", 0.8}}}};
  // Each segment's schedule (resumes chain): the first run's, then new weights.
  saved.mix.segment_schedules = {saved.mix.schedule, {{0, {{"a", 0.9}, {"b", 0.1}}}}};
  saved.mix.data_fingerprint = "mixdata-1";
  saved.mix.samples_per_epoch = 48;
  const std::string path = dir.path() + "/mix.pt";
  ASSERT_TRUE(SaveCheckpoint(path, *cnn, *opt, saved).ok());
  absl::StatusOr<CheckpointPosition> loaded = LoadCheckpoint(path, *cnn, *opt, torch::kCPU);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->batches_in_epoch, 12);
  ASSERT_EQ(loaded->mix.segments.size(), 2u);
  EXPECT_EQ(loaded->mix.segments[1].start_position, 24);
  EXPECT_EQ(loaded->mix.segments[1].start_step, 3);
  EXPECT_EQ(loaded->mix.segments[1].global_batch, 4);
  ASSERT_EQ(loaded->mix.schedule.size(), 2u);
  EXPECT_EQ(loaded->mix.schedule[0].step, 0);
  EXPECT_EQ(loaded->mix.schedule[0].weights, saved.mix.schedule[0].weights);
  EXPECT_EQ(loaded->mix.schedule[1].step, 4);
  EXPECT_EQ(loaded->mix.schedule[1].weights, saved.mix.schedule[1].weights);
  ASSERT_EQ(loaded->mix.segment_schedules.size(), 2u);
  ASSERT_EQ(loaded->mix.segment_schedules[0].size(), 2u);
  EXPECT_EQ(loaded->mix.segment_schedules[0][1].step, 4);
  EXPECT_EQ(loaded->mix.segment_schedules[0][1].weights, saved.mix.schedule[1].weights);
  ASSERT_EQ(loaded->mix.segment_schedules[1].size(), 1u);
  EXPECT_EQ(loaded->mix.segment_schedules[1][0].weights, saved.mix.segment_schedules[1][0].weights);
  EXPECT_EQ(loaded->mix.data_fingerprint, "mixdata-1");
  EXPECT_EQ(loaded->mix.samples_per_epoch, 48);

  // Segments without their schedules (as a run kept them before resumes chained): none
  // come back, and the rule reads the run's schedule for every segment.
  saved.mix.segment_schedules.clear();
  ASSERT_TRUE(SaveCheckpoint(path, *cnn, *opt, saved).ok());
  loaded = LoadCheckpoint(path, *cnn, *opt, torch::kCPU);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->mix.segments.size(), 2u);
  EXPECT_TRUE(loaded->mix.segment_schedules.empty());

  // No mixture: none of it is written, and none comes back.
  const std::string plain = dir.path() + "/plain.pt";
  ASSERT_TRUE(SaveCheckpoint(plain, *cnn, *opt, CheckpointPosition{}).ok());
  loaded = LoadCheckpoint(plain, *cnn, *opt, torch::kCPU);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->mix.segments.empty());
  EXPECT_TRUE(loaded->mix.schedule.empty());
  EXPECT_EQ(loaded->batches_in_epoch, 0);
}

// A checkpoint as written before elastic resume and mixtures: only the first meta.*
// entries. It loads, as no mixture at offset 0 with the epoch's batch count unknown.
TEST(CheckpointTest, ACheckpointFromBeforeMixturesLoads) {
  TempDir dir;
  std::unique_ptr<TrainableModel> cnn = Model("small-cnn", 4, 1);
  auto opt = AdamFor(*cnn);
  torch::serialize::OutputArchive archive;
  for (auto& [name, tensor] : cnn->NamedParameters()) archive.write("model." + name, tensor);
  for (auto& [name, tensor] : cnn->NamedBuffers()) archive.write("model." + name, tensor, true);
  torch::serialize::OutputArchive optimizer_archive;
  opt->save(optimizer_archive);
  archive.write("optimizer", optimizer_archive);
  archive.write("meta.format_version", c10::IValue(int64_t{1}));
  for (const char* name : {"meta.epoch", "meta.next_batch", "meta.global_step"}) {
    archive.write(name, c10::IValue(int64_t{3}));
  }
  archive.write("meta.world_size", c10::IValue(int64_t{2}));
  archive.write("meta.batch_size", c10::IValue(int64_t{4}));
  archive.write("meta.fingerprint", c10::IValue(std::string("old-job")));
  const std::string path = dir.path() + "/old.pt";
  archive.save_to(path);
  absl::StatusOr<CheckpointPosition> loaded = LoadCheckpoint(path, *cnn, *opt, torch::kCPU);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->next_batch, 3);
  EXPECT_EQ(loaded->fingerprint, "old-job");
  EXPECT_EQ(loaded->sample_offset, 0);
  EXPECT_EQ(loaded->batches_in_epoch, 0);
  EXPECT_TRUE(loaded->mix.segments.empty());
}

TEST(CheckpointTest, CorruptOrForeignCheckpointsAreRefused) {
  TempDir dir;
  const std::string path = dir.path() + "/c.pt";
  std::unique_ptr<TrainableModel> cnn = Model("small-cnn", 4, 1);
  auto opt = AdamFor(*cnn);
  ASSERT_TRUE(SaveCheckpoint(path, *cnn, *opt, CheckpointPosition{}).ok());

  // Truncated.
  const std::string truncated = dir.path() + "/truncated.pt";
  std::string bytes = ReadWholeFile(path);
  std::ofstream(truncated, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  absl::StatusOr<CheckpointPosition> r = LoadCheckpoint(truncated, *cnn, *opt, torch::kCPU);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find(truncated + " is unreadable"), std::string::npos)
      << r.status();

  // Another architecture.
  std::unique_ptr<TrainableModel> resnet = Model("resnet18", 4, 1);
  auto opt_r = AdamFor(*resnet);
  r = LoadCheckpoint(path, *resnet, *opt_r, torch::kCPU);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("'conv1.weight' has shape [8, 3, 3, 3], the model's is "
                                      "[64, 3, 7, 7]"),
            std::string::npos)
      << r.status();

  // Same architecture, another class count.
  std::unique_ptr<TrainableModel> wide = Model("small-cnn", 7, 1);
  auto opt_w = AdamFor(*wide);
  r = LoadCheckpoint(path, *wide, *opt_w, torch::kCPU);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("'fc.weight' has shape [4, 16], the model's is [7, 16]"),
            std::string::npos)
      << r.status();

  // Optimizer of another kind.
  torch::optim::SGD sgd(cnn->Parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  r = LoadCheckpoint(path, *cnn, sgd, torch::kCPU);
  EXPECT_FALSE(r.ok());

  // Not there at all.
  EXPECT_EQ(ResolveResumePath(dir.path() + "/missing.pt").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ResolveResumePath(dir.path()).status().code(), absl::StatusCode::kNotFound);
}

TEST(CheckpointTest, DirectoryKeepsNewestAndLatest) {
  TempDir dir;
  std::unique_ptr<TrainableModel> cnn = Model("small-cnn", 2, 1);
  auto opt = AdamFor(*cnn);
  for (int batch : {5, 10, 15, 20}) {
    CheckpointPosition p;
    p.epoch = 1;
    p.next_batch = batch;
    ASSERT_TRUE(SaveCheckpointInDir(dir.path(), /*keep=*/2, *cnn, *opt, p).ok());
  }
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    files.push_back(e.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files,
            (std::vector<std::string>{"ckpt-e0001-b000015.pt", "ckpt-e0001-b000020.pt", "latest"}));
  absl::StatusOr<std::string> resolved = ResolveResumePath(dir.path());
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(*resolved, dir.path() + "/ckpt-e0001-b000020.pt");
}

TEST(CheckpointTest, TrainerRefusesToResumeAnotherJobConfiguration) {
  TempDir dir;
  auto run = [&](const std::vector<std::string>& extra, const std::string& tag) {
    std::vector<std::string> argv = {BinaryPath("client/shardcast-train"),
                                     "--synthetic-batches",
                                     "3",
                                     "--num-classes",
                                     "2",
                                     "--arch",
                                     "small-cnn",
                                     "--crop",
                                     "8",
                                     "--epochs",
                                     "2",
                                     "--no-progress",
                                     "--ckpt-dir",
                                     dir.path() + "/ckpt"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    ChildProcess p;
    EXPECT_TRUE(
        p.Start(argv, dir.path() + "/" + tag + ".out", dir.path() + "/" + tag + ".err").ok());
    std::optional<int> status = p.WaitFor(std::chrono::minutes(2));
    EXPECT_TRUE(status.has_value());
    return status.value_or(-1);
  };
  int status = run({"-b", "4", "--max-steps", "2"}, "first");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << ReadWholeFile(dir.path() + "/first.err");
  status = run({"-b", "8", "--resume", dir.path() + "/ckpt"}, "second");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1);
  const std::string err = ReadWholeFile(dir.path() + "/second.err");
  EXPECT_NE(err.find("was taken with world size 1, batch size 4"), std::string::npos) << err;
  EXPECT_NE(err.find("this run has world size 1, batch size 8"), std::string::npos) << err;
  // The same configuration resumes (from batch 2 of epoch 0) and finishes.
  status = run({"-b", "4", "--resume", dir.path() + "/ckpt", "--metrics", dir.path() + "/m.jsonl"},
               "third");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << ReadWholeFile(dir.path() + "/third.err");
  const std::string metrics = ReadWholeFile(dir.path() + "/m.jsonl.rank0");
  EXPECT_NE(metrics.find("\"event\":\"start\",\"rank\":0,\"world_size\":1"), std::string::npos);
  EXPECT_NE(metrics.find("\"epoch\":0,\"next_batch\":2,\"step\":2"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\"event\":\"end\",\"rank\":0,\"step\":6"), std::string::npos) << metrics;
}

}  // namespace
}  // namespace shardcast::train
