#pragma once
// One language-model training step as an nn::Graph: GPT-2's next-token loss, backward, the
// optimizer's update. Shared by the GPT-2 tests and bench/gpt_step.
#include <memory>

#include "graph/graph.h"
#include "models/gpt2.h"
#include "optim/optimizer.h"

namespace test_graphs {

// Called with (input_ids, labels); returns {loss}.
struct LanguageModelTrainGraph : flow::nn::Graph {
  LanguageModelTrainGraph(std::shared_ptr<flow::models::GPT2LMHeadModel> net, std::shared_ptr<flow::optim::Optimizer> optimizer) {
    model = register_module("model", std::move(net));
    add_optimizer(std::move(optimizer));
  }
  flow::TensorList build(const flow::TensorList& in) override {
    flow::Tensor loss = model->loss(in[0], in[1]);
    loss.backward();
    return {loss};
  }
  std::shared_ptr<flow::models::GPT2LMHeadModel> model;
};

}  // namespace test_graphs
