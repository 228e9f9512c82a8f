#pragma once
// The quickstart's model: an MLP over flattened 28x28 FashionMNIST images, 10 classes.
#include <memory>
#include <optional>
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
  flow::Tensor forward(const flow::Tensor& x) override {
    if (!second_stage) return linear_relu_stack->forward(flatten->forward(x));
    // Pipeline: the first Linear and ReLU on one placement, the rest on second_stage.
    flow::Tensor h = flatten->forward(x);
    for (size_t i = 0; i < linear_relu_stack->size(); ++i) {
      if (i == 2) h = h.to_global(*second_stage, flow::sbp::broadcast());
      h = (*linear_relu_stack)[i]->forward(h);
    }
    return h;
  }
  std::shared_ptr<flow::nn::Flatten> flatten;
  std::shared_ptr<flow::nn::Sequential> linear_relu_stack;
  std::optional<flow::Placement> second_stage;  // set by a pipeline-parallel run
};
