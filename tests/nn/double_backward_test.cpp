// Gradients of the gradient ops gelu_grad, max_pool2d_grad, layer_norm_grad and
// batch_norm_train_grad: values from torch 1.13 (double backward of the same inputs) and the
// gradient checker on first-order gradients taken with create_graph.
#include <gtest/gtest.h>

#include "autograd/engine.h"
#include "common/gradcheck.h"
#include "common/reference.h"
#include "common/test_util.h"
#include "nn/functional.h"

using flow::Shape;
using flow::Tensor;
using flow::TensorList;
using flow::testing::grad_input;
using flow::testing::gradcheck;

namespace {

void expect_near(const Tensor& got, const std::vector<double>& want, double tolerance = 1e-8) {
  const std::vector<double> values = flow::testing::values(got);
  ASSERT_EQ(values.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(values[i], want[i], tolerance * (1 + std::abs(want[i]))) << "element " << i;
}

// The first-order gradients of sum(f(inputs)^3) w.r.t. every input, flattened into one tensor:
// cubing makes the upstream gradient depend on the inputs, so every path of the gradient op's vjp counts.
std::function<Tensor(const TensorList&)> first_order(std::function<Tensor(const TensorList&)> f) {
  return [f](const TensorList& in) {
    const TensorList grads = flow::autograd::grad({flow::sum(flow::pow(f(in), 3))}, in, {}, false, /*create_graph=*/true);
    TensorList flat;
    for (const Tensor& g : grads) flat.push_back(g.reshape({-1}));
    return flow::cat(flat);
  };
}

TEST(DoubleBackward, GeluSecondDerivativesArePyTorchs) {
  const std::vector<std::pair<std::string, std::vector<double>>> cases{
      {"none", {-0.107981933, 0.6161143218, 0.7978845608, 0.4715034394, -0.1056414618}},
      {"tanh", {-0.10787508, 0.6155068951, 0.7978845608, 0.4708629268, -0.1049702942}}};
  for (const auto& [case_approximate, expected] : cases) {
    const std::string approximate = case_approximate;  // clang 14 cannot capture a structured binding
    SCOPED_TRACE(approximate);
    Tensor x = flow::tensor<double>({-2.0, -0.5, 0.0, 0.7, 1.9}).requires_grad_(true);
    const Tensor g = flow::autograd::grad({flow::sum(flow::gelu(x, approximate))}, {x}, {}, false, true)[0];
    expect_near(flow::autograd::grad({flow::sum(g)}, {x})[0], expected);
    flow::manual_seed(3);
    EXPECT_TRUE(gradcheck(first_order([&](const TensorList& in) { return flow::gelu(in[0], approximate); }), {grad_input({2, 5}, -3, 3)}));
  }
}

TEST(DoubleBackward, MaxPoolGradientReadsTheUpstreamAtEachArgmax) {
  const Tensor x = flow::tensor<double>({1, 5, 2, 3, 0, 4, 7, 6, 8}, Shape{1, 1, 3, 3}).requires_grad_(true);
  Tensor weights = flow::tensor<double>({1, 2, 3, 4}, Shape{1, 1, 2, 2}).requires_grad_(true);
  const Tensor dx = flow::autograd::grad({flow::sum(flow::max_pool2d(x, {2, 2}, {1, 1}) * weights)}, {x}, {}, false, true)[0];
  // Argmaxes (0,1), (0,1), (2,0), (2,2) of the four windows read 1, 1, 6 and 8 of arange(9).
  expect_near(flow::autograd::grad({flow::sum(dx * flow::arange(9.0).reshape({1, 1, 3, 3}))}, {weights})[0], {1, 1, 6, 8});
  flow::manual_seed(4);
  EXPECT_TRUE(gradcheck(first_order([](const TensorList& in) { return flow::max_pool2d(in[0], {3, 2}, {2, 1}, {1, 1}); }),
                        {grad_input({2, 2, 5, 4})}));
}

TEST(DoubleBackward, LayerNormMatchesPyTorch) {
  Tensor x = flow::tensor<double>({0.5, -1.0, 2.0, 0.25, 1.5, 0.0, -0.5, 3.0}, Shape{2, 4}).requires_grad_(true);
  Tensor w = flow::tensor<double>({1.5, -0.5, 2.0, 1.0}).requires_grad_(true);
  Tensor b = flow::tensor<double>({0.1, 0.2, -0.3, 0.4}).requires_grad_(true);
  const Tensor y = flow::layer_norm(x, {4}, w, b);
  const TensorList d = flow::autograd::grad({flow::sum(flow::pow(y, 3))}, {x, w, b}, {}, false, true);
  const Tensor z = flow::sum(d[0]) + flow::sum(d[1] * flow::arange(4.0, flow::kFloat64)) + flow::sum(d[2]) * 0.5;
  const TensorList g = flow::autograd::grad({z}, {x, w, b});
  expect_near(g[0], {-38.63615041, 35.24290753, 30.69402874, -27.30078587, -32.24809349, -27.58400101, 37.46399668, 22.36809782}, 1e-7);
  expect_near(g[1], {0.742591035, 6.568881671, 51.69452009, 79.6054571}, 1e-7);
  expect_near(g[2], {2.5069568022, -5.2299799148, 79.4339702452, 54.4607092928}, 1e-7);
}

TEST(DoubleBackward, LayerNormPassesTheGradientChecker) {
  flow::manual_seed(5);
  EXPECT_TRUE(gradcheck(first_order([](const TensorList& in) { return flow::layer_norm(in[0], {3, 4}, in[1], in[2], 1e-3); }),
                        {grad_input({2, 3, 4}), grad_input({3, 4}), grad_input({3, 4})}));
  EXPECT_TRUE(gradcheck(first_order([](const TensorList& in) { return flow::layer_norm(in[0], {5}); }), {grad_input({3, 5})}));
}

TEST(DoubleBackward, TrainingBatchNormMatchesPyTorch) {
  Tensor x = flow::tensor<double>({0.5, 1.0, -1.0, 0.3, 2.0, 2.5, 1.5, -0.2, 0.0, 0.7, -0.5, 1.1}, Shape{2, 3, 2}).requires_grad_(true);
  Tensor w = flow::tensor<double>({1.5, -0.5, 2.0}).requires_grad_(true);
  Tensor b = flow::tensor<double>({0.1, 0.2, -0.3}).requires_grad_(true);
  const Tensor y = flow::nn::functional::batch_norm(x, Tensor(), Tensor(), w, b, /*training=*/true);
  const TensorList d = flow::autograd::grad({flow::sum(flow::pow(y, 3))}, {x, w, b}, {}, false, true);
  const Tensor z = flow::sum(d[0]) + flow::sum(d[1] * flow::arange(3.0, flow::kFloat64)) + flow::sum(d[2]);
  const TensorList g = flow::autograd::grad({z}, {x, w});
  expect_near(g[0], {-0.0001730404292, 0.0002595606438, 1.869452534, -1.680112144, -14.82736522, 48.1533708, 0.0006921617167,
                     -0.0007786819313, -3.579871833, 3.390531443, 33.79440828, -67.12041385},
              1e-6);
  expect_near(g[1], {35.99908863, 0.4130742741, -20.98360495}, 1e-7);
}

TEST(DoubleBackward, TrainingBatchNormPassesTheGradientChecker) {
  flow::manual_seed(6);
  // Every output of the training op, so the gradient paths through mean and invstd count too.
  auto outputs = [](const flow::BatchNormTrainResult& r) { return flow::cat({r.out.reshape({-1}), r.mean, r.invstd}); };
  EXPECT_TRUE(gradcheck(first_order([&](const TensorList& in) { return outputs(flow::batch_norm_train(in[0], in[1], in[2], 1e-3)); }),
                        {grad_input({3, 2, 2, 2}), grad_input({2}), grad_input({2})}));
  EXPECT_TRUE(gradcheck(first_order([&](const TensorList& in) { return outputs(flow::batch_norm_train(in[0])); }), {grad_input({4, 3})}));
}

}  // namespace
