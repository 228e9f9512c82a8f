// Reshaping a strided view (permuted, transposed, sliced) inside a Graph: the traced value has
// the strides it will have at run time, so reshape copies exactly when eager would, and the copy
// that makes it contiguous survives the passes.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "autograd/engine.h"
#include "common/test_util.h"
#include "core/ops/all.h"
#include "graph/graph.h"

namespace {

using flow::Tensor;
using flow::TensorList;

struct FunctionGraph : flow::nn::Graph {
  explicit FunctionGraph(std::function<TensorList(const TensorList&)> fn) : fn_(std::move(fn)) {}
  TensorList build(const TensorList& in) override { return fn_(in); }
  std::function<TensorList(const TensorList&)> fn_;
};

void expect_same(const Tensor& actual, const Tensor& expected) {
  ASSERT_EQ(actual.shape(), expected.shape());
  const std::vector<float> a = actual.tolist<float>(), e = expected.tolist<float>();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], e[i], 1e-5 * (1 + std::abs(e[i]))) << "element " << i;
}

TEST(GraphStridedViews, ReshapeOfPermutedAndSlicedTensorsEqualsEager) {
  const Tensor x = flow::randn({2, 3, 4});
  const auto fn = [](const TensorList& in) {
    return TensorList{in[0].permute({0, 2, 1}).reshape({2, 12}), in[0].slice(1, 0, 2).reshape({4, 4}),
                      in[0].transpose(0, 2).flatten(), (in[0].permute({2, 0, 1}) * 2.0).reshape({4, 6})};
  };
  FunctionGraph graph(fn);
  const TensorList eager = fn({x});
  const TensorList traced = graph(x);
  ASSERT_EQ(traced.size(), eager.size());
  for (size_t i = 0; i < eager.size(); ++i) expect_same(traced[i], eager[i]);
}

TEST(GraphStridedViews, GradientsThroughReshapedPermutesEqualEager) {
  const Tensor x = flow::randn({2, 3, 4});
  const Tensor w = flow::randn({12, 5});
  const auto fn = [&w](const TensorList& in) {
    const Tensor input = in[0].detach().requires_grad_();
    const Tensor loss = flow::matmul(input.permute({0, 2, 1}).reshape({2, 12}), w).relu().sum();
    return TensorList{loss, flow::autograd::grad({loss}, {input})[0]};
  };
  FunctionGraph graph(fn);
  const TensorList eager = fn({x});
  const TensorList traced = graph(x);
  expect_same(traced[0], eager[0]);
  expect_same(traced[1], eager[1]);
}

// A write through a view inside build(): the Graph computes the values and the gradients
// (through autograd's CopySlices) that eager computes.
TEST(GraphStridedViews, WritesThroughViewsEqualEager) {
  flow::manual_seed(5);
  const Tensor x = flow::randn({2, 3});
  const Tensor w = flow::randn({4, 3});
  const Tensor coefficients = flow::randn({4, 3});
  const auto fn = [&](const TensorList& in) {
    const Tensor source = in[0].detach().requires_grad_();
    const Tensor weight = in[1].detach().requires_grad_();
    Tensor y = weight * weight;  // mul saves its inputs, not y, which is written below
    y.slice(0, 1, 3).copy_(source * 2.0);
    y.select(1, 2).fill_(0.5);
    const Tensor loss = (y * coefficients).sum();
    const TensorList grads = flow::autograd::grad({loss}, {source, weight});
    return TensorList{loss, y * 1.0, grads[0], grads[1]};
  };
  FunctionGraph graph(fn);
  const TensorList eager = fn({x, w});
  const TensorList traced = graph(x, w);
  ASSERT_EQ(traced.size(), eager.size());
  for (size_t i = 0; i < eager.size(); ++i) {
    SCOPED_TRACE(i);
    expect_same(traced[i], eager[i]);
  }
}

}  // namespace
