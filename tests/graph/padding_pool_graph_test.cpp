// The composite forms inside a Graph: reflect, replicate and circular padding and avg_pool2d with
// ceil_mode / count_include_pad / divisor_override trace to the same values as eager.
#include <gtest/gtest.h>

#include "core/grad_mode.h"
#include "graph_helpers.h"
#include "nn/functional.h"
#include "nn/padding.h"

namespace nn = flow::nn;
using flow::Tensor;
using graph_test::EvalGraph;
using graph_test::max_relative_difference;

namespace {

// Circular padding through F.pad, which has no module of its own in PyTorch 1.13.
struct CircularPad : nn::Module {
  std::string name() const override { return "CircularPad"; }
  Tensor forward(const Tensor& input) override { return nn::functional::pad(input, {1, 2, 0, 1}, "circular"); }
};

TEST(PaddingPoolGraph, CompositesTraceToTheEagerValues) {
  flow::manual_seed(9);
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::ReflectionPad2d>(nn::ReflectionPad2dOptions({2, 1, 1, 0})));
  net->push_back(std::make_shared<nn::ReplicationPad2d>(1));
  net->push_back(std::make_shared<CircularPad>());
  net->push_back(std::make_shared<nn::AvgPool2d>(nn::AvgPool2dOptions(3).stride(2).padding(1).ceil_mode(true).count_include_pad(false)));
  net->push_back(std::make_shared<nn::AvgPool2d>(nn::AvgPool2dOptions({2, 1}).divisor_override(3)));
  const Tensor x = flow::randn({2, 3, 6, 5});
  Tensor eager;
  {
    flow::autograd::NoGradGuard no_grad;
    eager = net->forward(x);
  }
  EvalGraph graph(net);
  graph.eval();
  const Tensor traced = graph(x).at(0);
  ASSERT_EQ(traced.shape(), eager.shape());
  EXPECT_LE(max_relative_difference(traced, eager), 1e-5);
}

}  // namespace
