// Graph training equals eager training, bit for bit, for every optimizer with and without weight
// decay, momentum and AMP: the Graph's update rewrites (element-wise fusion, update-with-cast)
// must not change what a step computes, whatever number of writes an update makes.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/flow.h"
#include "graph_helpers.h"

namespace nn = flow::nn;
namespace optim = flow::optim;
using flow::Tensor;
using flow::TensorList;
using graph_test::TrainGraph;

namespace {

struct OptimizerCase {
  std::string name;
  std::function<std::shared_ptr<optim::Optimizer>(const TensorList&)> make;
};

std::vector<OptimizerCase> optimizer_cases() {
  using optim::AdamOptions;
  using optim::AdamWOptions;
  return {
      {"SGD", [](const TensorList& p) { return std::make_shared<optim::SGD>(p, optim::SGDOptions(0.1)); }},
      {"SGD_momentum_wd", [](const TensorList& p) { return std::make_shared<optim::SGD>(p, optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.01)); }},
      {"SGD_nesterov_dampening",
       [](const TensorList& p) { return std::make_shared<optim::SGD>(p, optim::SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(1e-3)); }},
      {"Adam", [](const TensorList& p) { return std::make_shared<optim::Adam>(p, AdamOptions(3e-3)); }},
      {"Adam_wd", [](const TensorList& p) { return std::make_shared<optim::Adam>(p, AdamOptions(3e-3).weight_decay(0.01)); }},
      {"AdamW_default_wd", [](const TensorList& p) { return std::make_shared<optim::AdamW>(p, AdamWOptions(3e-3)); }},
      {"AdamW_wd0", [](const TensorList& p) { return std::make_shared<optim::AdamW>(p, AdamWOptions(3e-3).weight_decay(0)); }},
      {"AdamW_large_wd", [](const TensorList& p) { return std::make_shared<optim::AdamW>(p, AdamWOptions(3e-3).weight_decay(0.5)); }},
      {"RMSprop", [](const TensorList& p) { return std::make_shared<optim::RMSprop>(p, optim::RMSpropOptions(1e-2)); }},
      {"RMSprop_centered_momentum_wd",
       [](const TensorList& p) { return std::make_shared<optim::RMSprop>(p, optim::RMSpropOptions(1e-2).centered(true).momentum(0.9).weight_decay(0.01)); }},
      {"Adagrad_wd", [](const TensorList& p) { return std::make_shared<optim::Adagrad>(p, optim::AdagradOptions(0.05).weight_decay(0.01).lr_decay(0.01)); }},
  };
}

std::shared_ptr<nn::Sequential> make_net() {
  flow::manual_seed(7);
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(12, 16), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(16, 4));
}

std::pair<Tensor, Tensor> batch(int step) {
  flow::manual_seed(500 + static_cast<uint64_t>(step));
  return {flow::randn({6, 12}), flow::randint(0, 4, {6})};
}

class OptimizerParity : public ::testing::TestWithParam<std::tuple<size_t, bool>> {};

TEST_P(OptimizerParity, GraphStepsEqualEagerSteps) {
  const auto [which, amp] = GetParam();
  const OptimizerCase c = optimizer_cases().at(which);
  SCOPED_TRACE(c.name + (amp ? " with bfloat16 AMP" : ""));
  auto eager_net = make_net(), graph_net = make_net();
  const auto eager_opt = c.make(eager_net->parameters());
  TrainGraph graph(graph_net, c.make(graph_net->parameters()));
  if (amp) graph.config().enable_amp();
  for (int step = 0; step < 5; ++step) {
    const auto [x, y] = batch(step);
    eager_opt->zero_grad();
    {
      const flow::autocast autocast(flow::kBFloat16, amp);
      nn::CrossEntropyLoss()(eager_net->forward(x), y).backward();
    }
    eager_opt->step();
    graph(x, y);
    const TensorList pe = eager_net->parameters(), pg = graph_net->parameters();
    ASSERT_EQ(pe.size(), pg.size());
    for (size_t i = 0; i < pe.size(); ++i) {
      ASSERT_EQ(pg[i].tolist<float>(), pe[i].tolist<float>()) << "step " << step << ", parameter " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryOptimizer, OptimizerParity, ::testing::Combine(::testing::Range<size_t>(0, optimizer_cases().size()), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<OptimizerParity::ParamType>& info) {
                           return optimizer_cases().at(std::get<0>(info.param)).name + (std::get<1>(info.param) ? "_amp" : "_float32");
                         });

}  // namespace
