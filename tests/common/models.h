#pragma once
// Small networks shared by the tests that export, run and serve models: the quickstart MLP, a
// LeNet-style CNN with batch norm, and a ResNet-style network with residual blocks.
#include <memory>

#include "core/grad_mode.h"
#include "core/ops/all.h"
#include "nn/conv_norm.h"
#include "nn/modules.h"

namespace test_models {

namespace nn = flow::nn;

// The quickstart MLP (narrower): flatten, 784-64-64-10 with ReLU.
inline std::shared_ptr<nn::Sequential> mlp() {
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 64),
                                          std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(64, 64),
                                          std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(64, 10));
}

// LeNet-style on 1x28x28: conv-bn-relu-pool twice, then 400-32-10.
inline std::shared_ptr<nn::Sequential> cnn() {
  return std::make_shared<nn::Sequential>(
      std::make_shared<nn::Conv2d>(1, 8, 3), std::make_shared<nn::BatchNorm2d>(8), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Conv2d>(8, 16, 3), std::make_shared<nn::BatchNorm2d>(16),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(400, 32), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(32, 10));
}

// conv-bn-relu-conv-bn plus the input (through a strided 1x1 conv + bn when the shape changes).
struct BasicBlock : nn::Module {
  BasicBlock(int64_t in, int64_t out, int64_t stride) {
    conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)));
    bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(out));
    conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(out, out, 3).padding(1).bias(false)));
    bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(out));
    if (stride != 1 || in != out) {
      downsample = register_module("downsample", std::make_shared<nn::Sequential>(
                                                     std::make_shared<nn::Conv2d>(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
                                                     std::make_shared<nn::BatchNorm2d>(out)));
    }
  }
  std::string name() const override { return "BasicBlock"; }
  flow::Tensor forward(const flow::Tensor& x) override {
    flow::Tensor y = (*bn2)((*conv2)(flow::relu((*bn1)((*conv1)(x)))));
    return flow::relu(flow::add(y, downsample ? (*downsample)(x) : x));
  }
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
  std::shared_ptr<nn::Sequential> downsample;
};

// ResNet-style on 1x28x28: stem, two residual blocks (the second strided), global average
// pooling, flatten, linear.
inline std::shared_ptr<nn::Sequential> resnet() {
  return std::make_shared<nn::Sequential>(
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions(1, 8, 3).padding(1).bias(false)), std::make_shared<nn::BatchNorm2d>(8),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<BasicBlock>(8, 8, 1),
      std::make_shared<BasicBlock>(8, 16, 2), std::make_shared<nn::AdaptiveAvgPool2d>(1), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(16, 10));
}

// Gives batch-norm layers non-trivial running statistics (a few training-mode forwards), so
// that eval-mode outputs depend on them.
inline void warm_up_batch_norm(nn::Module& net, const flow::Shape& input_shape) {
  flow::autograd::NoGradGuard no_grad;
  net.train();
  for (int i = 0; i < 3; ++i) net.forward(flow::randn(input_shape));
  net.eval();
}

}  // namespace test_models
