#include "models/vision/resnet.h"

#include "models/vision/weight_init.h"
#include "nn/init.h"

namespace flow::vision::models {
namespace {
std::shared_ptr<nn::Conv2d> conv3x3(int64_t in, int64_t out, int64_t stride = 1) {
  return std::make_shared<nn::Conv2d>(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}
std::shared_ptr<nn::Conv2d> conv1x1(int64_t in, int64_t out, int64_t stride = 1) {
  return std::make_shared<nn::Conv2d>(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false));
}
Tensor add_shortcut(const Tensor& branch, const std::shared_ptr<nn::Sequential>& downsample, const Tensor& input) {
  return branch + (downsample ? (*downsample)(input) : input);
}
}  // namespace

BasicBlock::BasicBlock(int64_t inplanes, int64_t planes, int64_t stride, std::shared_ptr<nn::Sequential> downsample) {
  conv1 = register_module("conv1", conv3x3(inplanes, planes, stride));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(planes));
  relu = register_module("relu", std::make_shared<nn::ReLU>());
  conv2 = register_module("conv2", conv3x3(planes, planes));
  bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(planes));
  if (downsample) this->downsample = register_module("downsample", std::move(downsample));
}

Tensor BasicBlock::forward(const Tensor& input) {
  const Tensor branch = (*bn2)((*conv2)((*relu)((*bn1)((*conv1)(input)))));
  return (*relu)(add_shortcut(branch, downsample, input));
}

Bottleneck::Bottleneck(int64_t inplanes, int64_t planes, int64_t stride, std::shared_ptr<nn::Sequential> downsample) {
  conv1 = register_module("conv1", conv1x1(inplanes, planes));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(planes));
  conv2 = register_module("conv2", conv3x3(planes, planes, stride));
  bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(planes));
  conv3 = register_module("conv3", conv1x1(planes, planes * kExpansion));
  bn3 = register_module("bn3", std::make_shared<nn::BatchNorm2d>(planes * kExpansion));
  relu = register_module("relu", std::make_shared<nn::ReLU>());
  if (downsample) this->downsample = register_module("downsample", std::move(downsample));
}

Tensor Bottleneck::forward(const Tensor& input) {
  Tensor branch = (*relu)((*bn1)((*conv1)(input)));
  branch = (*relu)((*bn2)((*conv2)(branch)));
  branch = (*bn3)((*conv3)(branch));
  return (*relu)(add_shortcut(branch, downsample, input));
}

ResNet::ResNet(ResNetBlock block, const std::vector<int64_t>& blocks_per_stage, const ResNetOptions& options) {
  FLOW_ARG_CHECK(blocks_per_stage.size() == 4, "ResNet", "expected the block counts of 4 stages, got ", blocks_per_stage.size());
  for (int64_t blocks : blocks_per_stage) FLOW_ARG_CHECK(blocks >= 1, "ResNet", "every stage needs at least one block, got ", blocks);
  FLOW_ARG_CHECK(options.num_classes_ >= 1, "ResNet", "num_classes must be positive, got ", options.num_classes_);
  conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, inplanes_, 7).stride(2).padding(3).bias(false)));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(inplanes_));
  relu = register_module("relu", std::make_shared<nn::ReLU>());
  maxpool = register_module("maxpool", std::make_shared<nn::MaxPool2d>(3, 2, 1));
  layer1 = register_module("layer1", make_stage(block, 64, blocks_per_stage[0], 1));
  layer2 = register_module("layer2", make_stage(block, 128, blocks_per_stage[1], 2));
  layer3 = register_module("layer3", make_stage(block, 256, blocks_per_stage[2], 2));
  layer4 = register_module("layer4", make_stage(block, 512, blocks_per_stage[3], 2));
  avgpool = register_module("avgpool", std::make_shared<nn::AdaptiveAvgPool2d>(1));
  fc = register_module("fc", std::make_shared<nn::Linear>(inplanes_, options.num_classes_));

  // torchvision re-initialises convs and norms and keeps fc's default (PyTorch Linear) init.
  detail::init_conv_and_batch_norm(*this);
  if (options.zero_init_residual_) {
    detail::for_each_module(*this, [](nn::Module& module) {
      if (auto* basic = dynamic_cast<BasicBlock*>(&module)) nn::init::zeros_(basic->bn2->weight);
      if (auto* bottleneck = dynamic_cast<Bottleneck*>(&module)) nn::init::zeros_(bottleneck->bn3->weight);
    });
  }
}

std::shared_ptr<nn::Sequential> ResNet::make_stage(ResNetBlock block, int64_t planes, int64_t blocks, int64_t stride) {
  const int64_t expansion = block == ResNetBlock::kBasic ? BasicBlock::kExpansion : Bottleneck::kExpansion;
  const int64_t out_channels = planes * expansion;
  auto make_block = [&](int64_t block_stride, std::shared_ptr<nn::Sequential> downsample) -> std::shared_ptr<nn::Module> {
    if (block == ResNetBlock::kBasic) return std::make_shared<BasicBlock>(inplanes_, planes, block_stride, std::move(downsample));
    return std::make_shared<Bottleneck>(inplanes_, planes, block_stride, std::move(downsample));
  };
  std::shared_ptr<nn::Sequential> downsample;
  if (stride != 1 || inplanes_ != out_channels) {
    downsample =
        std::make_shared<nn::Sequential>(conv1x1(inplanes_, out_channels, stride), std::make_shared<nn::BatchNorm2d>(out_channels));
  }
  auto stage = std::make_shared<nn::Sequential>();
  stage->push_back(make_block(stride, std::move(downsample)));
  inplanes_ = out_channels;
  for (int64_t i = 1; i < blocks; ++i) stage->push_back(make_block(1, nullptr));
  return stage;
}

Tensor ResNet::forward(const Tensor& input) {
  FLOW_ARG_CHECK(input.dim() == 4 && input.size(1) == 3, "ResNet", "expected input (N, 3, H, W), got ", input.shape());
  Tensor x = (*maxpool)((*relu)((*bn1)((*conv1)(input))));
  x = (*layer4)((*layer3)((*layer2)((*layer1)(x))));
  return (*fc)((*avgpool)(x).flatten(1));
}

std::shared_ptr<ResNet> resnet18(const ResNetOptions& options) {
  return std::make_shared<ResNet>(ResNetBlock::kBasic, std::vector<int64_t>{2, 2, 2, 2}, options);
}

std::shared_ptr<ResNet> resnet50(const ResNetOptions& options) {
  return std::make_shared<ResNet>(ResNetBlock::kBottleneck, std::vector<int64_t>{3, 4, 6, 3}, options);
}

}  // namespace flow::vision::models
