// ResNet-18 (torchvision architecture and init) in LibTorch C++.
#include "client/train/resnet.h"

namespace shardcast::train {
namespace {

namespace nn = torch::nn;

nn::Conv2d Conv(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, kernel).stride(stride).padding(padding).bias(false));
}

}  // namespace

BasicBlockImpl::BasicBlockImpl(int64_t in_planes, int64_t planes, int64_t stride) {
  conv1_ = register_module("conv1", Conv(in_planes, planes, 3, stride, 1));
  bn1_ = register_module("bn1", nn::BatchNorm2d(planes));
  conv2_ = register_module("conv2", Conv(planes, planes, 3, 1, 1));
  bn2_ = register_module("bn2", nn::BatchNorm2d(planes));
  if (stride != 1 || in_planes != planes) {
    downsample_ = register_module(
        "downsample",
        nn::Sequential(Conv(in_planes, planes, 1, stride, 0), nn::BatchNorm2d(planes)));
  }
}

torch::Tensor BasicBlockImpl::forward(const torch::Tensor& x) {
  torch::Tensor identity = downsample_ ? downsample_->forward(x) : x;
  torch::Tensor out = torch::relu(bn1_->forward(conv1_->forward(x)));
  out = bn2_->forward(conv2_->forward(out));
  return torch::relu(out + identity);
}

ResNet18Impl::ResNet18Impl(int64_t num_classes) {
  conv1_ = register_module("conv1", Conv(3, 64, 7, 2, 3));
  bn1_ = register_module("bn1", nn::BatchNorm2d(64));
  layer1_ = register_module("layer1", MakeLayer(64, 64, 1));
  layer2_ = register_module("layer2", MakeLayer(64, 128, 2));
  layer3_ = register_module("layer3", MakeLayer(128, 256, 2));
  layer4_ = register_module("layer4", MakeLayer(256, 512, 2));
  fc_ = register_module("fc", nn::Linear(512, num_classes));

  // torchvision: kaiming_normal_(fan_out, relu) for convs, BN weight 1 / bias 0; the
  // Linear keeps its default (kaiming_uniform a=sqrt(5), bias uniform) init.
  torch::NoGradGuard no_grad;
  for (auto& module : modules(/*include_self=*/false)) {
    if (auto* conv = module->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(conv->weight, /*a=*/0, torch::kFanOut, torch::kReLU);
    } else if (auto* bn = module->as<nn::BatchNorm2d>()) {
      nn::init::ones_(bn->weight);
      nn::init::zeros_(bn->bias);
    }
  }
}

nn::Sequential ResNet18Impl::MakeLayer(int64_t in_planes, int64_t planes, int64_t stride) {
  return nn::Sequential(BasicBlock(in_planes, planes, stride), BasicBlock(planes, planes, 1));
}

torch::Tensor ResNet18Impl::forward(torch::Tensor x) {
  x = torch::relu(bn1_->forward(conv1_->forward(x)));
  x = torch::max_pool2d(x, /*kernel_size=*/3, /*stride=*/2, /*padding=*/1);
  x = layer4_->forward(layer3_->forward(layer2_->forward(layer1_->forward(x))));
  x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
  return fc_->forward(x);
}

}  // namespace shardcast::train
