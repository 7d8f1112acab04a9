// The C++ ResNet-18 is torchvision's: its saved state_dict loads into
// torchvision.models.resnet18 with every key matching, both give the same logits for
// the same input, and the initialization follows torchvision's (kaiming fan_out for
// convs, BN 1/0). The reference is Debian's Python torch + torchvision.
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "client/train/model.h"
#include "gtest/gtest.h"
#include "tests/support/child_process.h"
#include "tests/support/server_process.h"
#include "tests/support/temp_dir.h"

namespace shardcast::train {
namespace {

using testing_util::ReadWholeFile;
using testing_util::TempDir;

std::unique_ptr<TrainableModel> ResNet(int64_t classes, uint64_t seed) {
  ModelSpec spec;
  spec.arch = "resnet18";
  spec.num_classes = classes;
  spec.init_seed = seed;
  absl::StatusOr<std::unique_ptr<TrainableModel>> model = MakeModel(spec);
  EXPECT_TRUE(model.ok()) << model.status();
  return std::move(*model);
}

TEST(ResNetConformanceTest, SameKeysAndLogitsAsTorchvision) {
  TempDir dir;
  std::unique_ptr<TrainableModel> model = ResNet(10, 5);
  {
    // A few training steps first, so running statistics are not the defaults.
    model->SetTraining(true);
    torch::NoGradGuard no_grad;
    for (int i = 0; i < 2; ++i) model->Forward(torch::randn({4, 3, 64, 64}));
  }
  model->SetTraining(false);
  torch::manual_seed(11);
  torch::Tensor input = torch::randn({2, 3, 64, 64});
  torch::Tensor logits;
  {
    torch::NoGradGuard no_grad;
    logits = model->Forward(input);
  }
  ASSERT_TRUE(model->SaveFinal(dir.path() + "/model.pt").ok());
  c10::Dict<std::string, torch::Tensor> io;
  io.insert("input", input);
  io.insert("logits", logits);
  std::vector<char> bytes = torch::pickle_save(c10::IValue(io));
  std::ofstream(dir.path() + "/io.pt", std::ios::binary).write(bytes.data(), bytes.size());

  const std::string script = dir.path() + "/check.py";
  std::ofstream(script) << R"(import sys, torch, torchvision
m = torchvision.models.resnet18(num_classes=10)
# --save files load under torch.load's safe mode (the default since torch 2.6).
result = m.load_state_dict(torch.load(sys.argv[1], weights_only=True), strict=True)
m.eval()
io = torch.load(sys.argv[2])
with torch.no_grad():
    out = m(io["input"])
diff = (out - io["logits"]).abs().max().item()
print("max_abs_diff", diff)
sys.exit(0 if diff < 1e-4 else 1)
)";
  const std::string command =
      absl::StrCat(REFERENCE_PYTHON, " ", script, " ", dir.path(), "/model.pt ", dir.path(),
                   "/io.pt > ", dir.path(), "/py.out 2>&1");
  const int status = std::system(command.c_str());
  EXPECT_EQ(status, 0) << ReadWholeFile(dir.path() + "/py.out");
}

TEST(ResNetConformanceTest, TorchvisionInitialization) {
  std::unique_ptr<TrainableModel> model = ResNet(1000, 3);
  int convs = 0;
  for (const auto& [name, t] : model->NamedParameters()) {
    if (t.dim() == 4) {
      // kaiming_normal_(mode="fan_out", nonlinearity="relu"): std = sqrt(2 / fan_out).
      ++convs;
      const double fan_out = t.size(0) * t.size(2) * t.size(3);
      const double expected = std::sqrt(2.0 / fan_out);
      EXPECT_NEAR(t.std().item<double>(), expected, 0.1 * expected) << name;
      EXPECT_NEAR(t.mean().item<double>(), 0.0, 0.1 * expected) << name;
    } else if (name.find("bn") != std::string::npos ||
               name.find("downsample.1") != std::string::npos) {
      const double want = name.find("weight") != std::string::npos ? 1.0 : 0.0;
      EXPECT_TRUE(torch::equal(t, torch::full_like(t, want))) << name;
    } else if (name == "fc.weight") {
      // nn.Linear's default: kaiming_uniform(a=sqrt(5)) -> U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
      const double bound = 1.0 / std::sqrt(512.0);
      EXPECT_LE(t.abs().max().item<double>(), bound);
      EXPECT_GT(t.abs().max().item<double>(), 0.9 * bound);
    }
  }
  EXPECT_EQ(convs, 20);  // 1 stem + 16 in blocks + 3 downsample
  int64_t total = 0;
  for (const torch::Tensor& p : model->Parameters()) total += p.numel();
  EXPECT_EQ(total, 11689512);  // torchvision resnet18(num_classes=1000)
}

}  // namespace
}  // namespace shardcast::train
