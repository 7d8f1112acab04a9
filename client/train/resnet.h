// ResNet-18 with torchvision's exact architecture and initialization, in LibTorch C++,
// so shardcast-train needs no Python to build its default model.
#ifndef SHARDCAST_CLIENT_TRAIN_RESNET_H_
#define SHARDCAST_CLIENT_TRAIN_RESNET_H_

#include <torch/torch.h>

namespace shardcast::train {

// torchvision.models.resnet.BasicBlock (expansion 1).
class BasicBlockImpl : public torch::nn::Module {
 public:
  BasicBlockImpl(int64_t in_planes, int64_t planes, int64_t stride);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr};
  // 1x1 conv + bn when the shape changes (stride != 1 or channels change), else empty.
  torch::nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(BasicBlock);

// torchvision.models.resnet18(num_classes=...): conv1 7x7/2, bn, relu, maxpool 3x3/2,
// layers [2,2,2,2], adaptive avgpool, fc. Parameter names match torchvision's
// state_dict keys (conv1.weight, layer1.0.bn1.running_mean, ..., fc.bias).
class ResNet18Impl : public torch::nn::Module {
 public:
  explicit ResNet18Impl(int64_t num_classes);
  torch::Tensor forward(torch::Tensor x);

 private:
  torch::nn::Sequential MakeLayer(int64_t in_planes, int64_t planes, int64_t stride);

  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr};
  torch::nn::Sequential layer1_{nullptr}, layer2_{nullptr}, layer3_{nullptr}, layer4_{nullptr};
  torch::nn::Linear fc_{nullptr};
};
TORCH_MODULE(ResNet18);

}  // namespace shardcast::train

#endif  // SHARDCAST_CLIENT_TRAIN_RESNET_H_
