#pragma once
// Graphs and Job queries shared by the tests in tests/graph.
#include <algorithm>
#include <memory>
#include <string>

#include "common/graphs.h"
#include "graph/graph.h"
#include "nn/modules.h"

namespace graph_test {

// Inference: the module's forward on the first input.
struct EvalGraph : flow::nn::Graph {
  explicit EvalGraph(std::shared_ptr<flow::nn::Module> net) { model = register_module("model", std::move(net)); }
  flow::TensorList build(const flow::TensorList& in) override { return {(*model)(in[0])}; }
  std::shared_ptr<flow::nn::Module> model;
};

using test_graphs::TrainGraph;

inline int count_op(const flow::graph::proto::Job& job, const std::string& op) {
  return static_cast<int>(std::count_if(job.nodes().begin(), job.nodes().end(), [&](const auto& n) { return n.op() == op; }));
}

}  // namespace graph_test
