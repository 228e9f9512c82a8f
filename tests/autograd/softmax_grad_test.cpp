// softmax's and log_softmax's gradient ops (softmax_grad, log_softmax_grad), which backward runs
// on the CPU: against the formulas in float64, and their argument checks.
#include <gtest/gtest.h>

#include "common/reference.h"
#include "common/test_util.h"
#include "core/flow.h"

using flow::Tensor;

namespace {
// The input gradient of softmax / log_softmax by the formulas, in float64.
Tensor reference_input_grad(const Tensor& grad, const Tensor& out, int64_t dim, bool log_output) {
  const Tensor g = grad.to(flow::kFloat64), y = out.to(flow::kFloat64);
  return log_output ? g - flow::exp(y) * flow::sum(g, {dim}, true) : y * (g - flow::sum(g * y, {dim}, true));
}
}  // namespace

// backward runs the gradient ops (softmax_grad, log_softmax_grad): along every dim, strided
// views, and over long float32 rows, against the formulas in float64.
TEST(Softmax, GradientOpsMatchTheFormulas) {
  flow::manual_seed(8);
  for (bool log_output : {false, true}) {
    SCOPED_TRACE(log_output ? "log_softmax" : "softmax");
    for (int64_t dim : {0, 1, 2}) {
      const Tensor x = (flow::randn({3, 4, 5}) * 3).requires_grad_();
      const Tensor y = log_output ? flow::log_softmax(x, dim) : flow::softmax(x, dim);
      const Tensor grad = flow::randn({3, 4, 5}).transpose(0, 2).contiguous().transpose(0, 2);  // a strided gradient
      y.backward(grad);
      flow::testing::expect_close(x.grad(), reference_input_grad(grad, y.detach(), dim, log_output), 1e-5, 1e-6);
    }
    const Tensor x = (flow::randn({2, 50257}) * 3).requires_grad_();
    const Tensor y = log_output ? flow::log_softmax(x, 1) : flow::softmax(x, 1);
    const Tensor grad = flow::randn({2, 50257});
    y.backward(grad);
    flow::testing::expect_close(x.grad(), reference_input_grad(grad, y.detach(), 1, log_output), 1e-5, 1e-6);
  }
}

TEST(Softmax, GradientOpsCheckTheirArguments) {
  const Tensor out = flow::softmax(flow::randn({2, 3}), 1);
  EXPECT_THROW_MSG(flow::apply_one(flow::find_op("softmax_grad"), {flow::zeros({3, 2}), out}, flow::Attrs().set("dim", int64_t{1})),
                   "[softmax_grad] grad (3,2) and out (2,3) must have the same shape");
  EXPECT_THROW_MSG(flow::apply_one(flow::find_op("log_softmax_grad"), {flow::zeros({2, 3}, flow::kFloat64), out},
                                   flow::Attrs().set("dim", int64_t{1})),
                   "[log_softmax_grad] grad has dtype float64 but out has float32");
}
