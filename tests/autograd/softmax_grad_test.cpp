// softmax's and log_softmax's gradient ops (softmax_grad, log_softmax_grad), which backward runs
// on the CPU: against the formulas in float64, and their argument checks.
#include <gtest/gtest.h>

#include <optional>

#include "autograd/engine.h"
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

// Autograd through the widening form: the input gradient comes back in bfloat16, the float32
// gradient of the widened input rounded once; a second derivative runs through the gradient op.
TEST(Softmax, WideningFormDifferentiatesToTheInputDtype) {
  flow::manual_seed(9);
  for (bool log_output : {false, true}) {
    SCOPED_TRACE(log_output ? "log_softmax" : "softmax");
    const Tensor x = (flow::randn({5, 37}) * 3).to(flow::kBFloat16).requires_grad_(true);
    const Tensor w = flow::randn({5, 37});
    const Tensor x32 = x.detach().to(flow::kFloat32).requires_grad_(true);
    const auto f = [&](const Tensor& input, std::optional<flow::DType> dtype) {
      if (dtype) return log_output ? flow::log_softmax(input, 1, *dtype) : flow::softmax(input, 1, *dtype);
      return log_output ? flow::log_softmax(input, 1) : flow::softmax(input, 1);
    };
    const Tensor y = f(x, flow::kFloat32);
    EXPECT_EQ(y.dtype(), flow::kFloat32);
    const Tensor grad = flow::autograd::grad({flow::sum(y * w)}, {x}, {}, false, true).at(0);
    const Tensor grad32 = flow::autograd::grad({flow::sum(f(x32, std::nullopt) * w)}, {x32}, {}, false, true).at(0);
    EXPECT_EQ(grad.dtype(), flow::kBFloat16);
    flow::testing::expect_same_bytes(grad, grad32.to(flow::kBFloat16));
    const Tensor second = flow::autograd::grad({flow::sum(grad.to(flow::kFloat32) * grad32.detach())}, {x}).at(0);
    const Tensor second32 = flow::autograd::grad({flow::sum(grad32 * grad32.detach())}, {x32}).at(0);
    flow::testing::expect_close(second.to(flow::kFloat32), second32, 2e-2, 2e-2);
  }
}
