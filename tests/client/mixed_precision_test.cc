// Mixed precision and memory format: the loss scaler's skip/backoff/growth, autocast
// scopes (bf16 on the CPU, as LibTorch runs it there), a model in bf16 + channels_last
// computing what the fp32 one does within bf16's precision, two Gloo ranks training in
// that format staying identical, and the saved state_dict loading under torch.load's
// safe mode (weights_only=True) while the trainer still reads its old format.
#include "client/train/mixed_precision.h"

#include <torch/torch.h>

#include <fstream>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/train/model.h"
#include "gtest/gtest.h"
#include "tests/support/child_process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/trainer_process.h"

namespace shardcast::train {
namespace {

using testing_util::ReadWholeFile;
using testing_util::RunTrainer;
using testing_util::TempDir;
using testing_util::TrainerExit;

torch::Tensor ParamWithGrad(std::vector<float> grad) {
  torch::Tensor p = torch::zeros({static_cast<int64_t>(grad.size())}).requires_grad_(true);
  p.mutable_grad() = torch::tensor(grad);
  return p;
}

TEST(LossScalerTest, OverflowSkipsAndHalvesFiniteStepsUnscaleAndGrow) {
  LossScaler scaler(/*initial_scale=*/1024.0, /*growth_interval=*/3);
  EXPECT_EQ(scaler.Scale(torch::tensor(2.0f)).item<float>(), 2048.0f);

  torch::Tensor p = ParamWithGrad({1024.0f, -512.0f});
  ASSERT_TRUE(scaler.UnscaleAndUpdate({p}));
  EXPECT_TRUE(torch::equal(p.grad(), torch::tensor({1.0f, -0.5f})));
  EXPECT_EQ(scaler.scale(), 1024.0);

  torch::Tensor inf = ParamWithGrad({1.0f, std::numeric_limits<float>::infinity()});
  torch::Tensor fine = ParamWithGrad({4.0f, 4.0f});
  EXPECT_FALSE(scaler.UnscaleAndUpdate({fine, inf}));
  EXPECT_EQ(scaler.scale(), 512.0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  EXPECT_FALSE(scaler.UnscaleAndUpdate({ParamWithGrad({std::nanf("")})}));
  EXPECT_EQ(scaler.scale(), 256.0);

  // Three good steps in a row (the overflow reset the count) double the scale.
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(scaler.UnscaleAndUpdate({ParamWithGrad({1.0f})}));
  EXPECT_EQ(scaler.scale(), 256.0);
  ASSERT_TRUE(scaler.UnscaleAndUpdate({ParamWithGrad({1.0f})}));
  EXPECT_EQ(scaler.scale(), 512.0);
}

TEST(PrecisionTest, NamesDefaultsAndRefusals) {
  EXPECT_EQ(*ParsePrecision("bf16"), Precision::kBf16);
  absl::StatusOr<Precision> bad = ParsePrecision("fp8");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("fp32, bf16, fp16"), std::string::npos) << bad.status();
  EXPECT_EQ(DefaultPrecision(torch::Device(torch::kCPU)), Precision::kFp32);
  EXPECT_EQ(DefaultPrecision(torch::Device(torch::kCUDA, 0)), Precision::kBf16);
  EXPECT_FALSE(CheckPrecision(Precision::kFp16, torch::Device(torch::kCPU)).ok());
  EXPECT_TRUE(CheckPrecision(Precision::kBf16, torch::Device(torch::kCPU)).ok());
}

TEST(AutocastScopeTest, Bf16InsideFp32OutsideNestedScopesRestore) {
  const torch::Device cpu(torch::kCPU);
  torch::Tensor a = torch::randn({4, 4}), b = torch::randn({4, 4});
  {
    AutocastScope outer(Precision::kBf16, cpu);
    EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kBFloat16);
    {
      AutocastScope none(Precision::kFp32, cpu);  // fp32 leaves the outer scope's state alone
      EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kBFloat16);
    }
    {
      AutocastScope inner(Precision::kBf16, cpu);
      EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kBFloat16);
    }
    EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kBFloat16);
  }
  EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kFloat32);
}

std::unique_ptr<TrainableModel> SmallCnn(uint64_t seed, int64_t classes = 5) {
  ModelSpec spec;
  spec.arch = "small-cnn";
  spec.num_classes = classes;
  spec.init_seed = seed;
  absl::StatusOr<std::unique_ptr<TrainableModel>> model = MakeModel(spec);
  EXPECT_TRUE(model.ok()) << model.status();
  return *std::move(model);
}

TEST(ComputeFormatTest, Bf16ChannelsLastComputesWhatFp32DoesWithinBf16Precision) {
  std::unique_ptr<TrainableModel> fp32 = SmallCnn(3), mixed = SmallCnn(3);
  mixed->SetComputeFormat({Precision::kBf16, /*channels_last=*/true});
  for (auto& [name, t] : mixed->NamedParameters()) {
    if (t.dim() == 4) {
      EXPECT_TRUE(t.is_contiguous(torch::MemoryFormat::ChannelsLast)) << name;
    }
    EXPECT_EQ(t.scalar_type(), torch::kFloat32) << name << ": weights stay fp32";
  }
  mixed->To(torch::Device(torch::kCPU));  // keeps the memory format
  for (auto& [name, t] : mixed->NamedParameters()) {
    if (t.dim() == 4) {
      EXPECT_TRUE(t.is_contiguous(torch::MemoryFormat::ChannelsLast)) << name;
    }
  }
  torch::manual_seed(9);
  const torch::Tensor x = torch::rand({8, 3, 16, 16});
  const torch::Tensor want = fp32->Forward(x);
  const torch::Tensor got = mixed->Forward(x);
  EXPECT_EQ(got.scalar_type(), torch::kFloat32);
  // bf16 keeps 8 bits of mantissa: ~0.4 % per rounding, a few roundings deep.
  const double scale = want.abs().max().item<double>();
  EXPECT_LT((got - want).abs().max().item<double>(), 0.05 * scale);
  EXPECT_GT((got - want).abs().max().item<double>(), 0.0) << "bf16 changed nothing: not active?";

  torch::nn::functional::cross_entropy(got, torch::tensor({0, 1, 2, 3, 4, 0, 1, 2})).backward();
  for (auto& [name, t] : mixed->NamedParameters()) {
    ASSERT_TRUE(t.grad().defined()) << name;
    EXPECT_TRUE(t.grad().isfinite().all().item<bool>()) << name;
    EXPECT_EQ(t.grad().scalar_type(), torch::kFloat32) << name;
  }
  mixed->SetComputeFormat({Precision::kFp32, /*channels_last=*/false});
  for (auto& [name, t] : mixed->NamedParameters()) EXPECT_TRUE(t.is_contiguous()) << name;
  EXPECT_TRUE(torch::allclose(mixed->Forward(x), want, 1e-5, 1e-6));
}

// 2 Gloo ranks in bf16 + channels_last (small CNN: no BatchNorm) on synthetic batches:
// both train, agree on every weight, and write state_dicts that Python's torch.load
// reads under weights_only=True.
TEST(TrainPrecisionTest, TwoRanksInBf16ChannelsLastStayIdenticalAndSaveLoadableFiles) {
  TempDir dir;
  const TrainerExit exit =
      RunTrainer({"--arch",
                  "small-cnn",
                  "--synthetic-batches",
                  "4",
                  "--num-classes",
                  "4",
                  "-b",
                  "8",
                  "--crop",
                  "16",
                  "--epochs",
                  "2",
                  "--nproc-per-node",
                  "2",
                  "-lr",
                  "0.01",
                  "--threads",
                  "1",
                  "--device",
                  "cpu",
                  "--precision",
                  "bf16",
                  "--channels-last",
                  "--no-progress",
                  "--metrics",
                  dir.path() + "/m.{rank}.jsonl",
                  "--save",
                  dir.path() + "/w.{rank}.pt"},
                 dir.path() + "/out", dir.path() + "/err", std::chrono::minutes(3));
  ASSERT_TRUE(exit.started.ok()) << exit.started;
  ASSERT_TRUE(exit.wait_status.has_value());
  ASSERT_TRUE(exit.code() == 0) << ReadWholeFile(dir.path() + "/err");
  EXPECT_NE(
      ReadWholeFile(dir.path() + "/m.0.jsonl").find(R"("precision":"bf16","channels_last":true)"),
      std::string::npos);

  absl::StatusOr<NamedTensors> w0 = LoadStateDict(dir.path() + "/w.0.pt");
  absl::StatusOr<NamedTensors> w1 = LoadStateDict(dir.path() + "/w.1.pt");
  ASSERT_TRUE(w0.ok() && w1.ok()) << w0.status() << " " << w1.status();
  ASSERT_EQ(w0->size(), w1->size());
  // Rank 0's initial weights (seed 0 + rank 0), which the broadcast gives both ranks.
  std::unique_ptr<TrainableModel> initial = SmallCnn(0, 4);
  const NamedTensors initial_params = initial->NamedParameters();
  const std::map<std::string, torch::Tensor> start(initial_params.begin(), initial_params.end());
  bool moved = false;
  for (size_t i = 0; i < w0->size(); ++i) {
    EXPECT_EQ((*w0)[i].first, (*w1)[i].first);
    EXPECT_TRUE(torch::equal((*w0)[i].second, (*w1)[i].second)) << (*w0)[i].first;
    EXPECT_TRUE((*w0)[i].second.is_contiguous()) << "saved in the standard layout";
    if (!torch::equal((*w0)[i].second, start.at((*w0)[i].first))) moved = true;
  }
  EXPECT_TRUE(moved) << "no weight changed: nothing trained";

  const std::string script = dir.path() + "/load.py";
  std::ofstream(script) << R"(import sys, torch
state = torch.load(sys.argv[1], weights_only=True)
assert isinstance(state, dict) and len(state) == 6, state.keys()
assert all(t.dtype == torch.float32 for t in state.values())
print("ok", sorted(state))
)";
  const std::string command = absl::StrCat(REFERENCE_PYTHON, " ", script, " ", dir.path(),
                                           "/w.0.pt > ", dir.path(), "/py.out 2>&1");
  EXPECT_EQ(std::system(command.c_str()), 0) << ReadWholeFile(dir.path() + "/py.out");
}

// The format --save wrote before (torch::pickle_save's type-tagged dict), which
// torch.load refuses in its safe mode, still loads with --weights.
TEST(StateDictTest, FilesOfTheTaggedFormatStillLoadAndAreWhatSafeModeRefused) {
  TempDir dir;
  std::unique_ptr<TrainableModel> model = SmallCnn(5);
  c10::Dict<std::string, torch::Tensor> tagged;
  for (auto& [name, t] : model->NamedParameters()) tagged.insert(name, t.detach());
  const std::vector<char> bytes = torch::pickle_save(c10::IValue(tagged));
  const std::string old_path = dir.path() + "/old.pt";
  std::ofstream(old_path, std::ios::binary).write(bytes.data(), bytes.size());
  std::unique_ptr<TrainableModel> other = SmallCnn(6);
  ASSERT_TRUE(LoadWeights(old_path, *other).ok());
  const NamedTensors want = model->NamedParameters(), got = other->NamedParameters();
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(torch::equal(want[i].second, got[i].second)) << want[i].first;
  }
  ASSERT_TRUE(SaveStateDict(dir.path() + "/new.pt", model->NamedParameters()).ok());

  const std::string script = dir.path() + "/safe.py";
  std::ofstream(script) << R"(import sys, torch
torch.load(sys.argv[2], weights_only=True)
try:
    torch.load(sys.argv[1], weights_only=True)
except Exception as e:
    print("refused:", str(e).splitlines()[0])
    sys.exit(0)
sys.exit("the tagged format loaded in safe mode: this test's premise is gone")
)";
  const std::string command = absl::StrCat(REFERENCE_PYTHON, " ", script, " ", old_path, " ",
                                           dir.path(), "/new.pt > ", dir.path(), "/py.out 2>&1");
  EXPECT_EQ(std::system(command.c_str()), 0) << ReadWholeFile(dir.path() + "/py.out");
}

}  // namespace
}  // namespace shardcast::train
