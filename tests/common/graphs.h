#pragma once
// Graphs shared by the tests (tests/graph, tests/lite, tests/onnx).
#include <memory>

#include "graph/graph.h"
#include "nn/modules.h"

namespace test_graphs {

// Inference in eval mode: the module's forward on the first input.
struct PredictGraph : flow::nn::Graph {
  explicit PredictGraph(std::shared_ptr<flow::nn::Module> net) {
    model = register_module("model", std::move(net));
    eval();
  }
  flow::TensorList build(const flow::TensorList& in) override { return {model->forward(in[0])}; }
  std::shared_ptr<flow::nn::Module> model;
};

// One training step: cross-entropy of the module's output against in[1], backward, optimizer.
struct TrainGraph : flow::nn::Graph {
  TrainGraph(std::shared_ptr<flow::nn::Module> net, std::shared_ptr<flow::optim::Optimizer> opt,
                 std::shared_ptr<flow::optim::LRScheduler> scheduler = nullptr) {
    model = register_module("model", std::move(net));
    add_optimizer(std::move(opt), std::move(scheduler));
  }
  flow::TensorList build(const flow::TensorList& in) override {
    flow::Tensor loss = loss_fn(model->forward(in[0]), in[1]);
    loss.backward();
    return {loss};
  }
  std::shared_ptr<flow::nn::Module> model;
  flow::nn::CrossEntropyLoss loss_fn;
};

}  // namespace test_graphs
