#pragma once
// torchvision's MobileNetV2 (Sandler et al., "MobileNetV2: Inverted Residuals and Linear
// Bottlenecks") with the same module tree, so parameter and buffer names and shapes are those of
// torchvision checkpoints ("features.0.0.weight", "features.1.conv.0.0.weight",
// "features.2.conv.3.running_var", "classifier.1.weight").
#include <memory>

#include "nn/conv_norm.h"
#include "nn/modules.h"

namespace flow::vision::models {

struct MobileNetV2Options {
  MobileNetV2Options& num_classes(int64_t v) {
    num_classes_ = v;
    return *this;
  }
  // Scales every layer's channels (rounded to multiples of 8); the last conv keeps at least 1280.
  MobileNetV2Options& width_mult(double v) {
    width_mult_ = v;
    return *this;
  }
  // Dropout probability before the classifier's linear layer.
  MobileNetV2Options& dropout(double v) {
    dropout_ = v;
    return *this;
  }
  int64_t num_classes_ = 1000;
  double width_mult_ = 1.0;
  double dropout_ = 0.2;
};

// Conv2d (no bias, "same" padding), BatchNorm2d, ReLU6 as children 0, 1, 2, like torchvision's
// Conv2dNormActivation with activation_layer=ReLU6.
class Conv2dNormActivation : public nn::Sequential {
 public:
  Conv2dNormActivation(int64_t in_channels, int64_t out_channels, int64_t kernel_size = 3, int64_t stride = 1, int64_t groups = 1);
  std::string name() const override { return "Conv2dNormActivation"; }
};

// 1x1 expansion to in_channels * expand_ratio channels (left out when expand_ratio is 1), 3x3
// depthwise conv (strided), then a linear 1x1 projection (no activation). The input is added back
// when stride is 1 and the channel count is unchanged. The layers are the child `conv`.
class InvertedResidual : public nn::Module {
 public:
  InvertedResidual(int64_t in_channels, int64_t out_channels, int64_t stride, int64_t expand_ratio);
  std::string name() const override { return "InvertedResidual"; }
  Tensor forward(const Tensor& input) override;
  std::shared_ptr<nn::Sequential> conv;

 private:
  bool use_residual_;
};

// features: a stride-2 stem, 17 inverted residual blocks and a 1x1 conv to 1280 channels;
// then global average pooling and classifier (Dropout, Linear). Input (N, 3, H, W), output
// logits (N, num_classes).
class MobileNetV2 : public nn::Module {
 public:
  explicit MobileNetV2(const MobileNetV2Options& options = {});
  std::string name() const override { return "MobileNetV2"; }
  Tensor forward(const Tensor& input) override;
  std::shared_ptr<nn::Sequential> features, classifier;
};

// 3,504,872 parameters at 1000 classes.
std::shared_ptr<MobileNetV2> mobilenet_v2(const MobileNetV2Options& options = {});

}  // namespace flow::vision::models
