#include "models/vision/mobilenet_v2.h"

#include <algorithm>
#include <cmath>

#include "models/vision/weight_init.h"
#include "nn/init.h"

namespace flow::vision::models {
namespace {
// Rounds channels to the nearest multiple of divisor, never below divisor and never more than
// 10% below value (the TensorFlow reference's rule, kept by torchvision).
int64_t make_divisible(double value, int64_t divisor = 8) {
  int64_t rounded = std::max(divisor, static_cast<int64_t>(value + static_cast<double>(divisor) / 2) / divisor * divisor);
  if (static_cast<double>(rounded) < 0.9 * value) rounded += divisor;
  return rounded;
}

// One stage of blocks: expansion factor t, output channels c, repeats n, first block's stride s.
struct StageSetting {
  int64_t t, c, n, s;
};
constexpr StageSetting kStages[] = {{1, 16, 1, 1}, {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
                                    {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
}  // namespace

Conv2dNormActivation::Conv2dNormActivation(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride, int64_t groups) {
  push_back(std::make_shared<nn::Conv2d>(
      nn::Conv2dOptions(in_channels, out_channels, kernel_size).stride(stride).padding((kernel_size - 1) / 2).groups(groups).bias(false)));
  push_back(std::make_shared<nn::BatchNorm2d>(out_channels));
  push_back(std::make_shared<nn::ReLU6>());
}

InvertedResidual::InvertedResidual(int64_t in_channels, int64_t out_channels, int64_t stride, int64_t expand_ratio)
    : use_residual_(stride == 1 && in_channels == out_channels) {
  FLOW_ARG_CHECK(stride == 1 || stride == 2, "InvertedResidual", "stride must be 1 or 2, got ", stride);
  FLOW_ARG_CHECK(expand_ratio >= 1, "InvertedResidual", "expand_ratio must be at least 1, got ", expand_ratio);
  const int64_t hidden = in_channels * expand_ratio;
  conv = register_module("conv", std::make_shared<nn::Sequential>());
  if (expand_ratio != 1) conv->push_back(std::make_shared<Conv2dNormActivation>(in_channels, hidden, 1));
  conv->push_back(std::make_shared<Conv2dNormActivation>(hidden, hidden, 3, stride, hidden));
  conv->push_back(std::make_shared<nn::Conv2d>(nn::Conv2dOptions(hidden, out_channels, 1).bias(false)));
  conv->push_back(std::make_shared<nn::BatchNorm2d>(out_channels));
}

Tensor InvertedResidual::forward(const Tensor& input) {
  const Tensor output = (*conv)(input);
  return use_residual_ ? input + output : output;
}

MobileNetV2::MobileNetV2(const MobileNetV2Options& options) {
  FLOW_ARG_CHECK(options.num_classes_ >= 1, "MobileNetV2", "num_classes must be positive, got ", options.num_classes_);
  FLOW_ARG_CHECK(options.width_mult_ > 0, "MobileNetV2", "width_mult must be positive, got ", options.width_mult_);
  FLOW_ARG_CHECK(options.dropout_ >= 0 && options.dropout_ <= 1, "MobileNetV2", "dropout must be in [0, 1], got ", options.dropout_);
  int64_t channels = make_divisible(32 * options.width_mult_);
  const int64_t last_channels = make_divisible(1280 * std::max(1.0, options.width_mult_));
  features = register_module("features", std::make_shared<nn::Sequential>());
  features->push_back(std::make_shared<Conv2dNormActivation>(3, channels, 3, 2));
  for (const StageSetting& stage : kStages) {
    const int64_t out_channels = make_divisible(static_cast<double>(stage.c) * options.width_mult_);
    for (int64_t i = 0; i < stage.n; ++i) {
      features->push_back(std::make_shared<InvertedResidual>(channels, out_channels, i == 0 ? stage.s : 1, stage.t));
      channels = out_channels;
    }
  }
  features->push_back(std::make_shared<Conv2dNormActivation>(channels, last_channels, 1));
  auto linear = std::make_shared<nn::Linear>(last_channels, options.num_classes_);
  classifier = register_module("classifier", std::make_shared<nn::Sequential>(std::make_shared<nn::Dropout>(options.dropout_), linear));

  detail::init_conv_and_batch_norm(*this);
  nn::init::normal_(linear->weight, 0.0, 0.01);
  nn::init::zeros_(linear->bias);
}

Tensor MobileNetV2::forward(const Tensor& input) {
  FLOW_ARG_CHECK(input.dim() == 4 && input.size(1) == 3, "MobileNetV2", "expected input (N, 3, H, W), got ", input.shape());
  const Tensor x = (*features)(input);
  // Averaging over all of H and W is adaptive_avg_pool2d(x, 1) for any input size.
  return (*classifier)(x.mean({2, 3}));
}

std::shared_ptr<MobileNetV2> mobilenet_v2(const MobileNetV2Options& options) { return std::make_shared<MobileNetV2>(options); }

}  // namespace flow::vision::models
