#pragma once
// The quickstart's model: an MLP over flattened 28x28 FashionMNIST images, 10 classes.
#include <memory>
#include <string>

#include "nn/modules.h"

struct NeuralNetwork : flow::nn::Module {
  NeuralNetwork() {
    namespace nn = flow::nn;
    flatten = register_module("flatten", std::make_shared<nn::Flatten>());
    linear_relu_stack = register_module(
        "linear_relu_stack",
        std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(28 * 28, 512), std::make_shared<nn::ReLU>(),
                                         std::make_shared<nn::Linear>(512, 512), std::make_shared<nn::ReLU>(),
                                         std::make_shared<nn::Linear>(512, 10)));
  }
  std::string name() const override { return "NeuralNetwork"; }
  flow::Tensor forward(const flow::Tensor& x) override { return linear_relu_stack->forward(flatten->forward(x)); }
  std::shared_ptr<flow::nn::Flatten> flatten;
  std::shared_ptr<flow::nn::Sequential> linear_relu_stack;
};
