// Layers language models use: RMSNorm (module and functional) against a hand-computed float64
// reference, its default eps, gradients to second order, printing and errors; Embedding's
// padding_idx; the Softplus module.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "autograd/engine.h"
#include "common/gradcheck.h"
#include "common/reference.h"
#include "common/test_util.h"
#include "core/grad_mode.h"
#include "nn/conv_norm.h"
#include "nn/modules.h"

using flow::Shape;
using flow::Tensor;
using flow::TensorList;
using flow::testing::expect_close;
using flow::testing::grad_input;
using flow::testing::gradcheck;
using flow::testing::values;
namespace nn = flow::nn;
namespace F = flow::nn::functional;

namespace {
// x / sqrt(mean(x^2) + eps) * weight over rows of `features` values, in double.
Tensor reference_rms_norm(const Tensor& x, int64_t features, const std::vector<double>& weight, double eps) {
  auto v = values(x);
  for (size_t row = 0; row < v.size() / features; ++row) {
    double square_mean = 0;
    for (int64_t f = 0; f < features; ++f) square_mean += v[row * features + f] * v[row * features + f] / static_cast<double>(features);
    for (int64_t f = 0; f < features; ++f) v[row * features + f] = v[row * features + f] / std::sqrt(square_mean + eps) * weight[f];
  }
  return flow::tensor(v, x.shape());
}
}  // namespace

TEST(RMSNorm, HandComputed) {
  // Row (3, 4): mean square 12.5, so y = x / sqrt(12.5 + eps).
  const Tensor x = flow::tensor<double>({3, 4, 0, 0}, Shape{2, 2});
  const auto y = F::rms_norm(x.slice(0, 0, 1), {2}, Tensor(), 0.0).tolist<double>();
  EXPECT_NEAR(y[0], 3 / std::sqrt(12.5), 1e-15);
  EXPECT_NEAR(y[1], 4 / std::sqrt(12.5), 1e-15);
  // An all-zero row stays zero: the default eps keeps the denominator off zero.
  EXPECT_EQ(F::rms_norm(x, {2}).tolist<double>()[2], 0.0);
  const auto weighted = F::rms_norm(x, {2}, flow::tensor<double>({2, -1}), 0.5).tolist<double>();
  EXPECT_NEAR(weighted[0], 2 * 3 / std::sqrt(13.0), 1e-15);
  EXPECT_NEAR(weighted[1], -4 / std::sqrt(13.0), 1e-15);
}

TEST(RMSNorm, MatchesReferenceOverTrailingDims) {
  flow::manual_seed(61);
  for (const auto& [input, normalized] : std::vector<std::pair<Shape, std::vector<int64_t>>>{{{5, 8}, {8}}, {{2, 3, 4}, {3, 4}}, {{7}, {7}}}) {
    SCOPED_TRACE(input.str());
    const Tensor x = flow::randn(input, flow::kFloat64) * 3 + 1;
    const Tensor w = flow::randn(Shape(normalized), flow::kFloat64);
    const int64_t features = Shape(normalized).numel();
    expect_close(F::rms_norm(x, normalized, w, 1e-3), reference_rms_norm(x, features, values(w), 1e-3), 1e-12, 1e-12);
    const Tensor x32 = x.to(flow::kFloat32);
    expect_close(F::rms_norm(x32, normalized), reference_rms_norm(x32, features, std::vector<double>(features, 1.0), 0.0), 1e-6, 1e-6);
  }
}

TEST(RMSNorm, DefaultEpsIsTheMachineEpsilonOfTheComputation) {
  // Tiny rows make eps dominate: y = x / sqrt(x^2 + eps) for a one-element row.
  const Tensor x64 = flow::tensor<double>({1e-9});
  EXPECT_NEAR(F::rms_norm(x64, {1}).item<double>(), 1e-9 / std::sqrt(1e-18 + std::numeric_limits<double>::epsilon()), 1e-18);
  const Tensor x32 = flow::tensor<float>({1e-4f});
  const double eps32 = std::numeric_limits<float>::epsilon();
  EXPECT_NEAR(F::rms_norm(x32, {1}).item<float>(), 1e-4 / std::sqrt(1e-8 + eps32), 1e-6);
  // bfloat16 computes in float32 and takes float32's epsilon, as PyTorch's opmath type does.
  const float bf16 = F::rms_norm(x32.to(flow::kBFloat16), {1}).to(flow::kFloat32).item<float>();
  const double wide = static_cast<double>(x32.to(flow::kBFloat16).to(flow::kFloat32).item<float>());
  EXPECT_NEAR(bf16, wide / std::sqrt(wide * wide + eps32), 0.01);
  nn::RMSNorm norm({1}, 1e-2);
  EXPECT_NEAR(norm(flow::tensor<double>({0.1})).item<double>(), 0.1 / std::sqrt(0.01 + 1e-2), 1e-12);
}

TEST(RMSNorm, ModuleHasWeightOnlyAndPrints) {
  nn::RMSNorm norm({3, 4});
  EXPECT_EQ(norm.state_dict().keys(), (std::vector<std::string>{"weight"}));
  EXPECT_EQ(norm.weight.shape(), (Shape{3, 4}));
  EXPECT_EQ(flow::sum(norm.weight).item<float>(), 12.f);
  EXPECT_TRUE(norm.weight.requires_grad());
  std::ostringstream out;
  out << norm << "\n" << nn::RMSNorm({8}, 1e-6, false);
  EXPECT_EQ(out.str(), "RMSNorm((3,4,), eps=None, elementwise_affine=True)\nRMSNorm((8,), eps=1e-06, elementwise_affine=False)");
  EXPECT_TRUE(nn::RMSNorm({8}, std::nullopt, false).state_dict().keys().empty());
}

TEST(RMSNorm, PassesGradcheckToSecondOrder) {
  flow::manual_seed(62);
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return F::rms_norm(in[0], {2, 3}, in[1], 1e-3); }, {grad_input({4, 2, 3}), grad_input({2, 3})}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return F::rms_norm(in[0], {5}); }, {grad_input({3, 5})}));
  auto module = std::make_shared<nn::RMSNorm>(std::vector<int64_t>{4});
  module->to(flow::kFloat64);
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return (*module)(in[0]); }, {grad_input({2, 4})}));
  EXPECT_TRUE(gradcheck(
      [](const TensorList& in) {
        Tensor y = flow::sum(F::rms_norm(in[0], {4}, in[1], 1e-3) * flow::sin(in[0]));
        return flow::autograd::grad({y}, {in[0], in[1]}, {}, false, /*create_graph=*/true)[0];
      },
      {grad_input({2, 4}), grad_input({4})}));
}

TEST(RMSNorm, Errors) {
  EXPECT_THROW_MSG(F::rms_norm(flow::zeros({2, 3}), {}), "[rms_norm] Expected normalized_shape to be at least 1-dimensional");
  EXPECT_THROW_MSG(F::rms_norm(flow::zeros({2, 3}), {3}, flow::ones({2})),
                   "[rms_norm] Expected weight to be of same shape as normalized_shape, but got weight of shape (2,) and normalized_shape = (3,)");
  EXPECT_THROW_MSG(F::rms_norm(flow::zeros({2, 3}), {2}), "[rms_norm] Given normalized_shape=(2,), expected input with shape (*, 2), but got input of size (2,3)");
  EXPECT_THROW_MSG(F::rms_norm(flow::zeros({3}), {2, 3}), "expected input with shape (*, 2, 3)");
  EXPECT_THROW_MSG(nn::RMSNorm({4})(flow::zeros({4, 3})), "[rms_norm] Given normalized_shape=(4,)");
  EXPECT_THROW_MSG(F::rms_norm(flow::ones({2, 3}, flow::kInt64), {3}), "[rms_norm] expected a floating point input, got int64");
}

TEST(Embedding, PaddingIdxRowStartsZeroAndGetsNoGradient) {
  flow::manual_seed(63);
  nn::Embedding embedding(5, 3, -2);  // wraps to row 3
  EXPECT_EQ(flow::sum(flow::abs(embedding.weight.select(0, 3))).item<float>(), 0.f);
  EXPECT_GT(flow::sum(flow::abs(embedding.weight.select(0, 2))).item<float>(), 0.f);
  std::ostringstream out;
  out << embedding << "\n" << nn::Embedding(5, 3);
  EXPECT_EQ(out.str(), "Embedding(5, 3, padding_idx=3)\nEmbedding(5, 3)");
  // The padding row's value still comes out (PyTorch does not force it), but passes no gradient.
  {
    flow::autograd::NoGradGuard no_grad;
    embedding.weight.select(0, 3).fill_(7);
  }
  const Tensor indices = flow::tensor<int64_t>({3, 1, 3, 0, 1, 4}, Shape{2, 3});
  const Tensor y = embedding(indices);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 3}));
  EXPECT_EQ(y.select(0, 0).select(0, 0).tolist<float>(), (std::vector<float>{7, 7, 7}));
  flow::sum(y * 2.0).backward();
  // Row r's gradient: 2 per occurrence per element; row 3 none, though it occurs twice.
  EXPECT_EQ(embedding.weight.grad().tolist<float>(),
            (std::vector<float>{2, 2, 2, 4, 4, 4, 0, 0, 0, 0, 0, 0, 2, 2, 2}));
}

TEST(Embedding, FunctionalPaddingIdxPassesGradcheck) {
  flow::manual_seed(64);
  const Tensor indices = flow::tensor<int64_t>({0, 2, 2, 1, 0}, Shape{5});
  // The padding row's value reaches the output but by design passes no gradient, so finite
  // differences are taken over the other rows only; the padding row is a constant.
  const Tensor padding_row = flow::randn({1, 4}, flow::kFloat64);
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return F::embedding(indices, flow::cat({in[0], padding_row}, 0), 2); },
                        {grad_input({2, 4})}));
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return F::embedding(indices, flow::cat({padding_row, in[0]}, 0), -3); },
                        {grad_input({2, 4})}));
  // Without padding_idx every row receives its gradient.
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return F::embedding(indices, in[0]); }, {grad_input({3, 4})}));
  Tensor w = flow::randn({3, 2}).requires_grad_(true);
  flow::sum(F::embedding(indices, w, 2)).backward();
  EXPECT_EQ(w.grad().tolist<float>(), (std::vector<float>{2, 2, 1, 1, 0, 0}));
}

TEST(Embedding, PaddingIdxOutOfRange) {
  EXPECT_THROW_MSG(nn::Embedding(5, 3, 5), "[Embedding] Padding_idx must be within num_embeddings, got 5 for 5 embeddings");
  EXPECT_THROW_MSG(nn::Embedding(5, 3, -6), "[Embedding] Padding_idx must be within num_embeddings");
  EXPECT_THROW_MSG(F::embedding(flow::tensor<int64_t>({0}), flow::zeros({2, 3}), 2), "[embedding] Padding_idx must be within num_embeddings");
}

TEST(Softplus, ModuleAndFunctional) {
  nn::Softplus softplus(2, 1);
  std::ostringstream out;
  out << softplus << "\n" << nn::Softplus();
  out << "\n" << nn::Softplus(0.5, 1e30);
  EXPECT_EQ(out.str(), "Softplus(beta=2.0, threshold=1.0)\nSoftplus(beta=1.0, threshold=20.0)\nSoftplus(beta=0.5, threshold=1e+30)");
  const Tensor x = flow::tensor<double>({-1, 0.25, 3});
  const auto y = softplus(x).tolist<double>();
  EXPECT_NEAR(y[0], std::log1p(std::exp(-2.0)) / 2, 1e-15);
  EXPECT_NEAR(y[1], std::log1p(std::exp(0.5)) / 2, 1e-15);
  EXPECT_EQ(y[2], 3.0);
  EXPECT_EQ(F::softplus(x, 2, 1).tolist<double>(), y);
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return softplus(in[0]); }, {grad_input({6}, -2, 0.4)}));
}
