#pragma once
// torchvision's ResNets (He et al., "Deep Residual Learning for Image Recognition") with the same
// module tree, so parameter and buffer names and shapes are those of torchvision checkpoints
// ("conv1.weight", "layer1.0.bn1.running_mean", "layer2.0.downsample.0.weight", "fc.bias").
// Bottleneck strides in its 3x3 conv, as torchvision does ("ResNet v1.5").
#include <memory>
#include <vector>

#include "nn/conv_norm.h"
#include "nn/modules.h"

namespace flow::vision::models {

struct ResNetOptions {
  ResNetOptions& num_classes(int64_t v) {
    num_classes_ = v;
    return *this;
  }
  // Starts the last BatchNorm of every residual branch at zero, so each block begins as the
  // identity (Goyal et al.); torchvision's zero_init_residual.
  ResNetOptions& zero_init_residual(bool v) {
    zero_init_residual_ = v;
    return *this;
  }
  int64_t num_classes_ = 1000;
  bool zero_init_residual_ = false;
};

// Two 3x3 convs; the shortcut goes through `downsample` when the shape changes.
class BasicBlock : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 1;
  BasicBlock(int64_t inplanes, int64_t planes, int64_t stride, std::shared_ptr<nn::Sequential> downsample);
  std::string name() const override { return "BasicBlock"; }
  Tensor forward(const Tensor& input) override;
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
  std::shared_ptr<nn::ReLU> relu;
  std::shared_ptr<nn::Sequential> downsample;  // null for the identity shortcut
};

// 1x1 reduce, 3x3 (strided), 1x1 expand to planes * 4 channels.
class Bottleneck : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t inplanes, int64_t planes, int64_t stride, std::shared_ptr<nn::Sequential> downsample);
  std::string name() const override { return "Bottleneck"; }
  Tensor forward(const Tensor& input) override;
  std::shared_ptr<nn::Conv2d> conv1, conv2, conv3;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2, bn3;
  std::shared_ptr<nn::ReLU> relu;
  std::shared_ptr<nn::Sequential> downsample;  // null for the identity shortcut
};

enum class ResNetBlock { kBasic, kBottleneck };

// Stem (7x7/2 conv, max pool /2), four stages of blocks (64, 128, 256, 512 planes; stages 2-4
// halve the resolution), global average pooling and a linear classifier. Input (N, 3, H, W),
// output logits (N, num_classes).
class ResNet : public nn::Module {
 public:
  // blocks_per_stage: how many blocks each of the four stages has ({2, 2, 2, 2} for resnet18).
  ResNet(ResNetBlock block, const std::vector<int64_t>& blocks_per_stage, const ResNetOptions& options = {});
  std::string name() const override { return "ResNet"; }
  Tensor forward(const Tensor& input) override;
  std::shared_ptr<nn::Conv2d> conv1;
  std::shared_ptr<nn::BatchNorm2d> bn1;
  std::shared_ptr<nn::ReLU> relu;
  std::shared_ptr<nn::MaxPool2d> maxpool;
  std::shared_ptr<nn::Sequential> layer1, layer2, layer3, layer4;
  std::shared_ptr<nn::AdaptiveAvgPool2d> avgpool;
  std::shared_ptr<nn::Linear> fc;

 private:
  std::shared_ptr<nn::Sequential> make_stage(ResNetBlock block, int64_t planes, int64_t blocks, int64_t stride);
  int64_t inplanes_ = 64;  // channels entering the next block while the stages are built
};

// 11,689,512 parameters at 1000 classes.
std::shared_ptr<ResNet> resnet18(const ResNetOptions& options = {});
// 25,557,032 parameters at 1000 classes.
std::shared_ptr<ResNet> resnet50(const ResNetOptions& options = {});

}  // namespace flow::vision::models
