// The layer_norm primitive: float64 loops against a hand-computed reference and the gradient
// checker, float32 oneDNN against float64, and errors (double backward: tests/nn/double_backward_test.cpp).
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/engine.h"
#include "common/gradcheck.h"
#include "common/reference.h"
#include "common/test_util.h"
#include "nn/functional.h"

using flow::Shape;
using flow::Tensor;
using flow::TensorList;
using flow::testing::expect_close;
using flow::testing::gradcheck;
using flow::testing::values;

namespace {

// (x - mean) / sqrt(var + eps) * weight + bias over rows of `features` values, in double.
Tensor reference_layer_norm(const Tensor& x, int64_t features, const std::vector<double>& weight, const std::vector<double>& bias,
                            double eps) {
  auto v = values(x);
  for (size_t row = 0; row < v.size() / features; ++row) {
    double mean = 0, var = 0;
    for (int64_t f = 0; f < features; ++f) mean += v[row * features + f] / static_cast<double>(features);
    for (int64_t f = 0; f < features; ++f) var += std::pow(v[row * features + f] - mean, 2) / static_cast<double>(features);
    for (int64_t f = 0; f < features; ++f) {
      double& value = v[row * features + f];
      value = (value - mean) / std::sqrt(var + eps) * weight[f] + bias[f];
    }
  }
  return flow::tensor(v, x.shape());
}

struct Case {
  Shape input;
  std::vector<int64_t> normalized;
};
std::vector<Case> cases() { return {{{5, 8}, {8}}, {{2, 3, 6}, {6}}, {{2, 3, 4}, {3, 4}}, {{7}, {7}}}; }

}  // namespace

TEST(LayerNormOp, MatchesReference) {
  flow::manual_seed(50);
  for (const Case& c : cases()) {
    const Tensor x = flow::randn(c.input, flow::kFloat64) * 3 + 1;
    const Tensor w = flow::randn(Shape(c.normalized), flow::kFloat64), b = flow::randn(Shape(c.normalized), flow::kFloat64);
    const int64_t features = Shape(c.normalized).numel();
    SCOPED_TRACE(::testing::Message() << "input " << c.input);
    expect_close(flow::layer_norm(x, c.normalized, w, b, 1e-3), reference_layer_norm(x, features, values(w), values(b), 1e-3), 1e-10, 1e-10);
    const std::vector<double> ones(features, 1.0), zeros(features, 0.0);
    expect_close(flow::layer_norm(x, c.normalized), reference_layer_norm(x, features, ones, zeros, 1e-5), 1e-10, 1e-10);
    expect_close(flow::nn::functional::layer_norm(x, c.normalized, w, Tensor(), 1e-3),
                 reference_layer_norm(x, features, values(w), zeros, 1e-3), 1e-10, 1e-10);
  }
}

TEST(LayerNormOp, PassesGradcheck) {
  flow::manual_seed(51);
  for (const Case& c : cases()) {
    SCOPED_TRACE(::testing::Message() << "input " << c.input);
    const Tensor x = flow::randn(c.input, flow::kFloat64).requires_grad_();
    const Tensor w = flow::randn(Shape(c.normalized), flow::kFloat64).requires_grad_();
    const Tensor b = flow::randn(Shape(c.normalized), flow::kFloat64).requires_grad_();
    EXPECT_TRUE(gradcheck([&](const TensorList& in) { return flow::layer_norm(in[0], c.normalized, in[1], in[2], 1e-3); }, {x, w, b}));
    EXPECT_TRUE(gradcheck([&](const TensorList& in) { return flow::layer_norm(in[0], c.normalized); }, {x}));
  }
}

TEST(LayerNormOp, Float32OneDnnMatchesFloat64Loops) {
  flow::manual_seed(52);
  for (const Case& c : cases()) {
    const Tensor x64 = flow::randn(c.input, flow::kFloat64) * 2 + 1, g64 = flow::randn(c.input, flow::kFloat64);
    const Tensor w64 = flow::randn(Shape(c.normalized), flow::kFloat64), b64 = flow::randn(Shape(c.normalized), flow::kFloat64);
    for (bool affine : {true, false}) {
      auto run = [&](flow::DType dtype) {
        Tensor x = x64.to(dtype).detach().requires_grad_(), w = w64.to(dtype).detach().requires_grad_();
        Tensor b = b64.to(dtype).detach().requires_grad_();
        const Tensor out = flow::layer_norm(x, c.normalized, affine ? w : Tensor(), affine ? b : Tensor(), 1e-5);
        TensorList results{out.detach()};
        for (const Tensor& grad : flow::autograd::grad({flow::sum(out * g64.to(dtype))}, affine ? TensorList{x, w, b} : TensorList{x})) {
          results.push_back(grad);
        }
        return results;
      };
      const TensorList single = run(flow::kFloat32), reference = run(flow::kFloat64);
      ASSERT_EQ(single.size(), reference.size());
      for (size_t i = 0; i < single.size(); ++i) {
        SCOPED_TRACE(::testing::Message() << "input " << c.input << " affine " << affine << " result " << i);
        expect_close(single[i], reference[i], 1e-4, 1e-4);
      }
    }
  }
}

TEST(LayerNormOp, ChecksArguments) {
  const Tensor x = flow::randn({2, 3, 4});
  EXPECT_THROW_MSG(flow::layer_norm(x, {3}), "[layer_norm] input (2,3,4) does not end with normalized_shape (3,)");
  EXPECT_THROW_MSG(flow::layer_norm(x, {}), "does not end with normalized_shape");
  EXPECT_THROW_MSG(flow::layer_norm(x, {4}, flow::randn({5})), "[layer_norm] weight should have shape (4,), got (5,)");
  EXPECT_THROW_MSG(flow::layer_norm(x, {4}, flow::randn({4}, flow::kFloat64)), "weight has dtype float64 but input has float32");
  EXPECT_THROW_MSG(flow::layer_norm(flow::zeros({2, 4}, flow::kInt64), {4}), "expected a floating input, got int64");
}
