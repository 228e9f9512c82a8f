#pragma once
// Graphs, models, batches and comparisons shared by the tests in tests/graph.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/graphs.h"
#include "core/ops/all.h"
#include "graph/graph.h"
#include "nn/conv_norm.h"
#include "nn/modules.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"

namespace graph_test {

namespace nn = flow::nn;

// Inference: the module's forward on the first input.
struct EvalGraph : nn::Graph {
  explicit EvalGraph(std::shared_ptr<nn::Module> net) { model = register_module("model", std::move(net)); }
  flow::TensorList build(const flow::TensorList& in) override { return {(*model)(in[0])}; }
  std::shared_ptr<nn::Module> model;
};

using test_graphs::TrainGraph;

inline int count_op(const flow::graph::proto::Job& job, const std::string& op) {
  return static_cast<int>(std::count_if(job.nodes().begin(), job.nodes().end(), [&](const auto& n) { return n.op() == op; }));
}

// The quickstart MLP on (N, 1, 28, 28) images.
inline std::shared_ptr<nn::Sequential> make_mlp() {
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Flatten>());
  net->push_back(std::make_shared<nn::Linear>(784, 64));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::Linear>(64, 64));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::Linear>(64, 10));
  return net;
}

// A LeNet-style CNN on (N, 1, 28, 28) images.
inline std::shared_ptr<nn::Sequential> make_cnn() {
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Conv2d>(nn::Conv2dOptions(1, 8, 3)));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::MaxPool2d>(2));
  net->push_back(std::make_shared<nn::Conv2d>(nn::Conv2dOptions(8, 16, 3)));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::MaxPool2d>(2));
  net->push_back(std::make_shared<nn::Flatten>());
  net->push_back(std::make_shared<nn::Linear>(400, 32));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::Linear>(32, 10));
  return net;
}

// Deterministic batches: step k gets its own inputs and labels.
inline std::pair<flow::Tensor, flow::Tensor> batch(int64_t step, const flow::Shape& shape) {
  flow::manual_seed(1000 + static_cast<uint64_t>(step));
  return {flow::randn(shape), flow::randint(0, 10, {shape[0]})};
}

inline void copy_params(nn::Module& from, nn::Module& to) { to.load_state_dict(from.state_dict()); }

inline double max_relative_difference(const flow::Tensor& a, const flow::Tensor& b) {
  const auto x = a.tolist<double>(), y = b.tolist<double>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]) / std::max(1e-3, std::abs(y[i])));
  return worst;
}

inline void expect_same_parameters(nn::Module& a, nn::Module& b, double tolerance) {
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_LE(max_relative_difference(pa[i].second, pb[i].second), tolerance) << pa[i].first;
}

// Eager training with cross-entropy, step k on batch(k, shapes[k]).
inline void eager_train(nn::Module& model, flow::optim::Optimizer& opt, const std::vector<flow::Shape>& shapes,
                        flow::optim::LRScheduler* scheduler = nullptr) {
  nn::CrossEntropyLoss loss_fn;
  for (size_t k = 0; k < shapes.size(); ++k) {
    auto [x, y] = batch(static_cast<int64_t>(k), shapes[k]);
    opt.zero_grad();
    loss_fn(model.forward(x), y).backward();
    opt.step();
    if (scheduler) scheduler->step();
  }
}

inline void eager_train(nn::Module& model, flow::optim::Optimizer& opt, int steps, const flow::Shape& shape,
                        flow::optim::LRScheduler* scheduler = nullptr) {
  eager_train(model, opt, std::vector<flow::Shape>(static_cast<size_t>(steps), shape), scheduler);
}

}  // namespace graph_test
