// Frozen inference plans (graph/frozen_inference.h, GraphConfig::enable_inference_freezing): an
// inference Graph on CPU runs with its weights frozen and its convolutions, pooling and linears on
// blocked layouts, gives eager's numbers, and follows every change of its parameters and buffers.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/models.h"
#include "core/grad_mode.h"
#include "core/ops/all.h"
#include "core/thread_pool.h"
#include "graph/graph.h"
#include "graph_helpers.h"
#include "optim/optimizer.h"

namespace nn = flow::nn;
using flow::Tensor;
using graph_test::EvalGraph;
using graph_test::max_relative_difference;

namespace {

const flow::Shape kImages{4, 1, 28, 28};

Tensor eager_eval(nn::Module& net, const Tensor& x) {
  flow::autograd::NoGradGuard no_grad;
  return net.forward(x);
}

std::shared_ptr<nn::Sequential> warmed_resnet() {
  flow::manual_seed(3);
  auto net = test_models::resnet();
  test_models::warm_up_batch_norm(*net, kImages);
  return net;
}

// Blocked kernels sum in another order than the eager ones.
constexpr double kTolerance = 1e-4;

}  // namespace

TEST(FrozenInference, ResnetRunsFrozenOnBlockedLayoutsAndMatchesEagerAndTheUnfrozenPlan) {
  auto net = warmed_resnet();
  EvalGraph frozen(net), unfrozen(net);
  unfrozen.config().enable_inference_freezing(false);
  for (int k = 0; k < 3; ++k) {
    const Tensor x = flow::randn(kImages);
    const Tensor got = frozen(x).at(0);
    EXPECT_TRUE(frozen.ran_frozen());
    EXPECT_GT(frozen.frozen_blocked_steps(), 0);
    EXPECT_LE(max_relative_difference(got, eager_eval(*net, x)), kTolerance);
    EXPECT_LE(max_relative_difference(got, unfrozen(x).at(0)), kTolerance);
    EXPECT_FALSE(unfrozen.ran_frozen());
    EXPECT_EQ(unfrozen.frozen_blocked_steps(), 0);
  }
}

TEST(FrozenInference, FollowsAnEagerOptimizerStepLoadStateDictAndNewRunningStatistics) {
  auto net = warmed_resnet();
  EvalGraph graph(net);
  const Tensor x = flow::randn(kImages);
  graph(x);
  ASSERT_TRUE(graph.ran_frozen());
  // Each change below: the next call runs unfrozen (the parameters changed since the previous
  // call), the one after freezes again; both give eager's numbers for the changed weights.
  auto expect_follows = [&](const char* what) {
    for (bool frozen : {false, true}) {
      EXPECT_LE(max_relative_difference(graph(x).at(0), eager_eval(*net, x)), kTolerance) << what;
      EXPECT_EQ(graph.ran_frozen(), frozen) << what;
    }
  };
  flow::optim::SGD sgd(net->parameters(), flow::optim::SGDOptions(0.5));
  {
    net->train();
    const Tensor loss = flow::sum(net->forward(x));
    loss.backward();
    sgd.step();
    net->eval();
  }
  expect_follows("after an eager SGD step (and the train-mode forward's running statistics)");

  flow::manual_seed(9);
  auto other = test_models::resnet();
  test_models::warm_up_batch_norm(*other, kImages);
  net->load_state_dict(other->state_dict());
  expect_follows("after load_state_dict");

  {
    flow::autograd::NoGradGuard no_grad;
    net->train();
    net->forward(flow::randn(kImages) * 3.0);  // only the batch norms' running statistics change
    net->eval();
  }
  expect_follows("after new running statistics");
}

TEST(FrozenInference, WeightsChangedBeforeEveryCallAreNeverFrozen) {
  flow::manual_seed(4);
  auto net = test_models::mlp();
  net->eval();
  EvalGraph graph(net);
  const Tensor x = flow::randn({8, 1, 28, 28});
  graph(x);
  auto first = net->parameters().front();
  for (int k = 0; k < 4; ++k) {
    {
      flow::autograd::NoGradGuard no_grad;
      first.copy_(first * 0.9);
    }
    EXPECT_LE(max_relative_difference(graph(x).at(0), eager_eval(*net, x)), kTolerance);
    EXPECT_FALSE(graph.ran_frozen());
  }
  graph(x);
  EXPECT_TRUE(graph.ran_frozen());
}

TEST(FrozenInference, FreezesAgainForOtherKernelThreads) {
  auto net = warmed_resnet();
  EvalGraph graph(net);
  const Tensor x = flow::randn(kImages);
  const int threads = flow::get_num_threads();
  for (int n : {1, 2, 1}) {
    flow::set_num_threads(n);
    EXPECT_LE(max_relative_difference(graph(x).at(0), eager_eval(*net, x)), kTolerance);
    EXPECT_TRUE(graph.ran_frozen());
  }
  flow::set_num_threads(threads);
}

TEST(FrozenInference, PipelinedRunsOfAFrozenPlanMatchEager) {
  auto net = warmed_resnet();
  EvalGraph graph(net);
  std::vector<Tensor> inputs;
  for (int k = 0; k < 4; ++k) inputs.push_back(flow::randn(kImages));
  graph(inputs[0]);
  const auto outputs = graph.run_pipelined(4, [&](int64_t k) { return flow::TensorList{inputs[k]}; });
  EXPECT_TRUE(graph.ran_frozen());
  for (int k = 0; k < 4; ++k) EXPECT_LE(max_relative_difference(outputs[k].at(0), eager_eval(*net, inputs[k])), kTolerance);
}

TEST(FrozenInference, TrainingGraphsAndGraphsWritingBuffersRunUnfrozen) {
  flow::manual_seed(5);
  auto net = test_models::cnn();
  auto sgd = std::make_shared<flow::optim::SGD>(net->parameters(), flow::optim::SGDOptions(0.1));
  test_graphs::TrainGraph train(net, sgd);
  train(flow::randn(kImages), flow::randint(0, 10, {4}));
  EXPECT_FALSE(train.ran_frozen());

  // Train mode: the batch norms update their running statistics in the Job.
  net->train();
  EvalGraph updating(net);
  const Tensor running_mean = net->named_buffers().front().second;
  const std::vector<float> before = running_mean.tolist<float>();
  updating(flow::randn(kImages));
  EXPECT_FALSE(updating.ran_frozen());
  EXPECT_NE(running_mean.tolist<float>(), before);
  const std::string refusal = updating.explain().plans.at(0).freeze_refusal;
  EXPECT_NE(refusal.find("in place"), std::string::npos) << refusal;
}

// The layout pass applies convolutions' ReLUs inside oneDNN's primitives only for inputs within
// the bound it planned with (finite, at most 1e6): a piece with a NaN or a huge value runs every
// node through its op's kernel, so its NaN reaches the output as in eager, while the other pieces
// of the same pipelined run take the blocked steps.
TEST(FrozenInference, PiecesOutsideTheInputBoundRunOnTheOpKernelsAndKeepNan) {
  auto net = warmed_resnet();
  EvalGraph graph(net);
  std::vector<Tensor> inputs;
  for (int k = 0; k < 4; ++k) inputs.push_back(flow::randn(kImages).contiguous());
  inputs[1].data_ptr<float>()[100] = std::numeric_limits<float>::quiet_NaN();  // image 0
  inputs[2].data_ptr<float>()[200] = 2e6f;
  graph(inputs[0]);
  const auto outputs = graph.run_pipelined(4, [&](int64_t k) { return flow::TensorList{inputs[k]}; });
  EXPECT_TRUE(graph.ran_frozen());
  for (int k = 0; k < 4; ++k) {
    SCOPED_TRACE(k);
    const auto got = outputs[k].at(0).contiguous().tolist<double>(), want = eager_eval(*net, inputs[k]).contiguous().tolist<double>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(std::isnan(got[i]), std::isnan(want[i])) << "at " << i;
      if (!std::isnan(want[i])) EXPECT_NEAR(got[i], want[i], kTolerance * std::max(1.0, std::abs(want[i]))) << "at " << i;
    }
  }
  EXPECT_TRUE(std::isnan(outputs[1].at(0).select(0, 0).sum().item<double>()));
}
