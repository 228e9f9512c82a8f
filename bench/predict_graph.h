#pragma once
// The inference Graph the deploy benchmarks export: the module in eval mode on one input.
#include <memory>

#include "graph/graph.h"
#include "nn/module.h"

namespace bench {

struct PredictGraph : flow::nn::Graph {
  explicit PredictGraph(std::shared_ptr<flow::nn::Module> net) : model(register_module("model", std::move(net))) {
    eval();
  }
  flow::TensorList build(const flow::TensorList& in) override { return {model->forward(in[0])}; }
  std::shared_ptr<flow::nn::Module> model;
};

}  // namespace bench
