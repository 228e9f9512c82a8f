#pragma once
// Graphs and Job queries shared by the tests in tests/graph.
#include <algorithm>
#include <memory>
#include <string>

#include "graph/graph.h"
#include "nn/modules.h"

namespace graph_test {

// Inference: the module's forward on the first input.
struct EvalGraph : flow::nn::Graph {
  explicit EvalGraph(std::shared_ptr<flow::nn::Module> net) { model = register_module("model", std::move(net)); }
  flow::TensorList build(const flow::TensorList& in) override { return {(*model)(in[0])}; }
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

inline int count_op(const flow::graph::proto::Job& job, const std::string& op) {
  return static_cast<int>(std::count_if(job.nodes().begin(), job.nodes().end(), [&](const auto& n) { return n.op() == op; }));
}

}  // namespace graph_test
