// nn::Graph against eager: inference and training of the quickstart MLP and a LeNet-style CNN
// give the same numbers; state_dict resumes exactly; errors and printing. Several input
// signatures: recompile_test.cpp.
#include <gtest/gtest.h>

#include <sstream>

#include "common/test_util.h"
#include "core/grad_mode.h"
#include "core/ops/all.h"
#include "graph/graph.h"
#include "graph_helpers.h"
#include "nn/conv_norm.h"
#include "nn/modules.h"

namespace nn = flow::nn;
namespace optim = flow::optim;
using flow::Tensor;
using flow::TensorList;

using graph_test::batch;
using graph_test::copy_params;
using graph_test::eager_train;
using graph_test::EvalGraph;
using graph_test::expect_same_parameters;
using graph_test::make_cnn;
using graph_test::make_mlp;
using graph_test::max_relative_difference;
using graph_test::TrainGraph;

TEST(Graph, InferenceMatchesEagerForMlpAndCnn) {
  for (auto [net, shape] : {std::pair{make_mlp(), flow::Shape{16, 1, 28, 28}}, std::pair{make_cnn(), flow::Shape{8, 1, 28, 28}}}) {
    net->eval();
    EvalGraph graph(net);
    for (int k = 0; k < 3; ++k) {
      const Tensor x = batch(k, shape).first;
      const Tensor lazy = graph(x).at(0);
      flow::autograd::NoGradGuard no_grad;
      // The frozen plan's convolutions and linears are oneDNN's blocked kernels: another
      // summation order than the eager kernels' (graph/frozen_inference.h).
      EXPECT_LE(max_relative_difference(lazy, net->forward(x)), 1e-4);
    }
    EXPECT_TRUE(graph.is_compiled());
    EXPECT_TRUE(graph.ran_frozen());
  }
}

TEST(Graph, TrainingMatchesEagerForFiftySteps) {
  for (auto [make, shape] : {std::pair{&make_mlp, flow::Shape{16, 1, 28, 28}}, std::pair{&make_cnn, flow::Shape{8, 1, 28, 28}}}) {
    auto eager_net = make();
    auto graph_net = make();
    copy_params(*eager_net, *graph_net);
    optim::SGD eager_opt(eager_net->parameters(), optim::SGDOptions(0.05).momentum(0.9));
    eager_train(*eager_net, eager_opt, 50, shape);
    auto graph_opt = std::make_shared<optim::SGD>(graph_net->parameters(), optim::SGDOptions(0.05).momentum(0.9));
    TrainGraph graph(graph_net, graph_opt);
    for (int k = 0; k < 50; ++k) {
      auto [x, y] = batch(k, shape);
      graph(x, y);
    }
    EXPECT_EQ(graph.train_step(), 50);
    expect_same_parameters(*graph_net, *eager_net, 1e-4);
  }
}

TEST(Graph, BatchNormTrainingMatchesEager) {
  // batch_norm_train/_eval primitives and the running-stat writes (assign) traced into a Job.
  auto make = [] {
    auto net = std::make_shared<nn::Sequential>();
    net->push_back(std::make_shared<nn::Conv2d>(nn::Conv2dOptions(1, 4, 3)));
    net->push_back(std::make_shared<nn::BatchNorm2d>(4));
    net->push_back(std::make_shared<nn::ReLU>());
    net->push_back(std::make_shared<nn::MaxPool2d>(2));
    net->push_back(std::make_shared<nn::Flatten>());
    net->push_back(std::make_shared<nn::Linear>(4 * 5 * 5, 10));
    return net;
  };
  const flow::Shape shape{8, 1, 12, 12};
  auto eager_net = make();
  auto graph_net = make();
  copy_params(*eager_net, *graph_net);
  optim::SGD eager_opt(eager_net->parameters(), optim::SGDOptions(0.01));
  eager_train(*eager_net, eager_opt, 3, shape);
  TrainGraph graph(graph_net, std::make_shared<optim::SGD>(graph_net->parameters(), optim::SGDOptions(0.01)));
  for (int k = 0; k < 3; ++k) {
    auto [x, y] = batch(k, shape);
    graph(x, y);
  }
  expect_same_parameters(*graph_net, *eager_net, 1e-4);
  const auto eager_state = eager_net->state_dict(), graph_state = graph_net->state_dict();
  for (const char* name : {"1.running_mean", "1.running_var"}) {
    EXPECT_LE(max_relative_difference(graph_state.at(name), eager_state.at(name)), 1e-5) << name;
  }
  eager_net->eval();
  graph_net->eval();
  EvalGraph eval_graph(graph_net);
  const Tensor x = batch(7, shape).first;
  flow::autograd::NoGradGuard no_grad;
  EXPECT_LE(max_relative_difference(eval_graph(x).at(0), eager_net->forward(x)), 1e-4);
}

TEST(Graph, AdamWithSchedulerMatchesEager) {
  const flow::Shape shape{16, 1, 28, 28};
  auto eager_net = make_mlp();
  auto graph_net = make_mlp();
  copy_params(*eager_net, *graph_net);
  optim::Adam eager_opt(eager_net->parameters(), optim::AdamOptions(1e-3).weight_decay(1e-4));
  optim::StepLR eager_scheduler(eager_opt, 5, 0.5);
  eager_train(*eager_net, eager_opt, 12, shape, &eager_scheduler);
  auto graph_opt = std::make_shared<optim::Adam>(graph_net->parameters(), optim::AdamOptions(1e-3).weight_decay(1e-4));
  auto graph_scheduler = std::make_shared<optim::StepLR>(*graph_opt, 5, 0.5);
  TrainGraph graph(graph_net, graph_opt, graph_scheduler);
  for (int k = 0; k < 12; ++k) {
    auto [x, y] = batch(k, shape);
    graph(x, y);
  }
  expect_same_parameters(*graph_net, *eager_net, 1e-4);
  EXPECT_DOUBLE_EQ(graph_opt->param_groups()[0].options.at("lr"), eager_opt.param_groups()[0].options.at("lr"));
}

TEST(Graph, StateDictResumesTrainingExactly) {
  const flow::Shape shape{16, 1, 28, 28};
  auto straight_net = make_mlp();
  auto resumed_net = make_mlp();
  copy_params(*straight_net, *resumed_net);
  auto straight_opt = std::make_shared<optim::SGD>(straight_net->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  TrainGraph straight(straight_net, straight_opt);
  for (int k = 0; k < 10; ++k) {
    auto [x, y] = batch(k, shape);
    straight(x, y);
  }
  const std::string path = unique_temp_path("graph_state.safetensors");
  {
    auto first_opt = std::make_shared<optim::SGD>(resumed_net->parameters(), optim::SGDOptions(0.05).momentum(0.9));
    TrainGraph first(resumed_net, first_opt);
    for (int k = 0; k < 5; ++k) {
      auto [x, y] = batch(k, shape);
      first(x, y);
    }
    flow::save(first.state_dict(), path);
  }
  auto fresh_net = make_mlp();  // different initial weights, overwritten by the checkpoint
  auto fresh_opt = std::make_shared<optim::SGD>(fresh_net->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  TrainGraph resumed(fresh_net, fresh_opt);
  {
    auto [x, y] = batch(0, shape);
    resumed.load_state_dict(flow::load(path));
    EXPECT_EQ(resumed.train_step(), 5);
  }
  for (int k = 5; k < 10; ++k) {
    auto [x, y] = batch(k, shape);
    resumed(x, y);
  }
  expect_same_parameters(*fresh_net, *straight_net, 0.0);
}

TEST(Graph, EagerModuleSeesGraphUpdatesAndGraphSeesEagerChanges) {
  auto net = make_mlp();
  auto opt = std::make_shared<optim::SGD>(net->parameters(), optim::SGDOptions(0.1));
  TrainGraph graph(net, opt);
  const Tensor before = net->parameters()[0].clone();
  auto [x, y] = batch(0, {4, 1, 28, 28});
  graph(x, y);
  EXPECT_GT(flow::abs(net->parameters()[0] - before).max().item<double>(), 0.0);
  EXPECT_FALSE(net->parameters()[0].grad().defined()) << "graph gradients are not left on the eager parameters";
  EXPECT_FALSE(net->parameters()[0].is_lazy());

  auto eval_net = make_mlp();
  EvalGraph eval(eval_net);
  const Tensor first = eval(x).at(0);
  {
    flow::autograd::NoGradGuard no_grad;
    for (auto& p : eval_net->parameters()) p.zero_();
  }
  EXPECT_EQ(flow::abs(eval(x).at(0)).max().item<double>(), 0.0);
}

TEST(Graph, ValueBranchingIsAnError) {
  struct Branching : nn::Graph {
    TensorList build(const TensorList& in) override {
      if (in[0].sum().item<double>() > 0) return {in[0]};
      return {-in[0]};
    }
  } branching;
  EXPECT_THROW_MSG(branching(flow::randn({3})), "lazy");
}

TEST(Graph, ErrorInsideTheRuntimeSurfacesAsFlowError) {
  struct Failing : nn::Graph {
    TensorList build(const TensorList& in) override { return {flow::index_select(in[0], 0, in[1])}; }
  } graph;
  const Tensor x = flow::randn({4, 3});
  EXPECT_EQ(graph(x, flow::tensor(std::vector<int64_t>{0, 2})).at(0).size(0), 2);
  EXPECT_THROW_MSG(graph(x, flow::tensor(std::vector<int64_t>{0, 9})), "index_select");
  EXPECT_EQ(graph(x, flow::tensor(std::vector<int64_t>{1, 3})).at(0).size(0), 2) << "the graph still runs after an error";
}

TEST(Graph, PrintsNestedStructureAndDebugLog) {
  auto net = make_mlp();
  auto opt = std::make_shared<optim::SGD>(net->parameters(), optim::SGDOptions(0.1));
  TrainGraph graph(net, opt);
  std::ostringstream log;
  graph.debug(2, log);
  auto [x, y] = batch(0, {4, 1, 28, 28});
  graph(x, y);
  std::ostringstream printed;
  printed << graph;
  const std::string text = printed.str();
  EXPECT_NE(text.find("(GRAPH:" + graph.name() + ":TrainGraph): ("), std::string::npos) << text;
  EXPECT_NE(text.find("(CONFIG:config:GraphConfig(training=true, cache_limit=8, compiled_plans=1))"), std::string::npos) << text;
  EXPECT_NE(text.find("(INPUT:_" + graph.name() + "_input.0:tensor(..., size=(4, 1, 28, 28), dtype=flow.float32"), std::string::npos) << text;
  EXPECT_NE(text.find("(MODULE:model.1:Linear(in_features=784, out_features=64, bias=True)): ("), std::string::npos) << text;
  EXPECT_NE(text.find("(PARAMETER:model.1.weight:tensor(..., size=(64, 784), dtype=flow.float32, device=cpu, requires_grad=true)): ()"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("(OUTPUT:_" + graph.name() + "_output.0:tensor(..., size=(), dtype=flow.float32"), std::string::npos) << text;
  const std::string debug = log.str();
  EXPECT_NE(debug.find("building module model.1 (Linear)"), std::string::npos) << debug;
  EXPECT_NE(debug.find("op model.1.linear = linear(model.0.view:0, model.1.weight:0, model.1.bias:0) -> ((4, 64), float32, cpu, B)"), std::string::npos) << debug;
  EXPECT_NE(debug.find("pass dead_code_elimination"), std::string::npos) << debug;
  EXPECT_NE(debug.find("planned peak"), std::string::npos) << debug;
}
