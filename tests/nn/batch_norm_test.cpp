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
using flow::testing::grad_input;
using flow::testing::gradcheck;
using flow::testing::values;

namespace {

std::vector<Shape> shapes() { return {{5, 3}, {2, 3, 5}, {2, 3, 4, 5}, {2, 3, 2, 3, 2}}; }

// Calls fn(flat index, channel) for every element of an (N, C, ...) shape.
template <typename Fn>
void for_each_element(const Shape& shape, Fn&& fn) {
  const int64_t inner = shape.numel() / (shape[0] * shape[1]);
  for (int64_t i = 0; i < shape.numel(); ++i) fn(i, (i / inner) % shape[1]);
}

// (x - mean) * invstd * weight + bias per channel, in double.
Tensor reference_normalize(const Tensor& x, const std::vector<double>& mean, const std::vector<double>& invstd,
                           const std::vector<double>& weight, const std::vector<double>& bias) {
  auto v = values(x);
  for_each_element(x.shape(), [&](int64_t i, int64_t c) { v[i] = (v[i] - mean[c]) * invstd[c] * weight[c] + bias[c]; });
  return flow::tensor(v, x.shape());
}

// Batch mean and biased variance per channel, in double.
std::pair<std::vector<double>, std::vector<double>> reference_stats(const Tensor& x) {
  const auto v = values(x);
  const int64_t channels = x.size(1);
  const double count = static_cast<double>(x.numel() / channels);
  std::vector<double> mean(channels, 0.0), var(channels, 0.0);
  for_each_element(x.shape(), [&](int64_t i, int64_t c) { mean[c] += v[i] / count; });
  for_each_element(x.shape(), [&](int64_t i, int64_t c) { var[c] += (v[i] - mean[c]) * (v[i] - mean[c]) / count; });
  return {mean, var};
}

std::vector<double> invstd_of(const std::vector<double>& var, double eps) {
  std::vector<double> invstd;
  for (double v : var) invstd.push_back(1.0 / std::sqrt(v + eps));
  return invstd;
}

}  // namespace

TEST(BatchNormOps, EvalMatchesReference) {
  flow::manual_seed(40);
  const double eps = 1e-3;
  for (const Shape& shape : shapes()) {
    for (flow::DType dtype : {flow::kFloat32, flow::kFloat64}) {
      Tensor x = (flow::randn(shape) * 3 + 1).to(dtype), running_mean = flow::randn({3}).to(dtype);
      Tensor running_var = flow::rand({3}).to(dtype) + 0.5, weight = flow::randn({3}).to(dtype), bias = flow::randn({3}).to(dtype);
      const auto invstd = invstd_of(values(running_var), eps);
      expect_close(flow::batch_norm_eval(x, running_mean, running_var, weight, bias, eps),
                   reference_normalize(x, values(running_mean), invstd, values(weight), values(bias)), 1e-5, 1e-5);
      expect_close(flow::batch_norm_eval(x, running_mean, running_var, Tensor(), Tensor(), eps),
                   reference_normalize(x, values(running_mean), invstd, {1, 1, 1}, {0, 0, 0}), 1e-5, 1e-5);
    }
  }
}

TEST(BatchNormOps, TrainMatchesReference) {
  flow::manual_seed(41);
  const double eps = 1e-5;
  for (const Shape& shape : shapes()) {
    for (flow::DType dtype : {flow::kFloat32, flow::kFloat64}) {
      Tensor x = (flow::randn(shape) * 2 - 3).to(dtype), weight = flow::randn({3}).to(dtype), bias = flow::randn({3}).to(dtype);
      const auto [mean, var] = reference_stats(x);
      const auto invstd = invstd_of(var, eps);
      const flow::BatchNormTrainResult result = flow::batch_norm_train(x, weight, bias, eps);
      expect_close(result.out, reference_normalize(x, mean, invstd, values(weight), values(bias)), 1e-4, 1e-5);
      expect_close(result.mean, flow::tensor(mean, Shape{3}), 1e-5, 1e-5);
      expect_close(result.invstd, flow::tensor(invstd, Shape{3}), 1e-5, 1e-6);
      expect_close(flow::batch_norm_train(x, Tensor(), Tensor(), eps).out, reference_normalize(x, mean, invstd, {1, 1, 1}, {0, 0, 0}), 1e-4,
                   1e-5);
    }
  }
}

TEST(BatchNormOps, Float32OneDnnMatchesFloat64Loops) {
  // float32 runs oneDNN, float64 the loops: outputs and all gradients agree, including the
  // gradient paths through the mean and invstd outputs.
  flow::manual_seed(42);
  for (const Shape& shape : shapes()) {
    Tensor x64 = flow::randn(shape, flow::kFloat64) * 2 + 1, w64 = flow::randn({3}, flow::kFloat64), b64 = flow::randn({3}, flow::kFloat64);
    Tensor rm64 = flow::randn({3}, flow::kFloat64), rv64 = flow::rand({3}, flow::kFloat64) + 0.5;
    Tensor g64 = flow::randn(shape, flow::kFloat64), gm64 = flow::randn({3}, flow::kFloat64), gi64 = flow::randn({3}, flow::kFloat64);
    for (bool affine : {true, false}) {
      auto run = [&](flow::DType dtype) {
        Tensor x = x64.to(dtype).detach().requires_grad_(), w = w64.to(dtype).detach().requires_grad_();
        Tensor b = b64.to(dtype).detach().requires_grad_();
        const Tensor weight = affine ? w : Tensor(), bias = affine ? b : Tensor();
        const auto train = flow::batch_norm_train(x, weight, bias, 1e-5);
        const Tensor eval = flow::batch_norm_eval(x, rm64.to(dtype), rv64.to(dtype), weight, bias, 1e-5);
        const Tensor loss = flow::sum(train.out * g64.to(dtype)) + flow::sum(train.mean * gm64.to(dtype)) +
                            flow::sum(train.invstd * gi64.to(dtype)) + flow::sum(eval * eval);
        TensorList results{train.out.detach(), train.mean.detach(), train.invstd.detach(), eval.detach()};
        for (const Tensor& grad : flow::autograd::grad({loss}, affine ? TensorList{x, w, b} : TensorList{x})) results.push_back(grad);
        return results;
      };
      const TensorList single = run(flow::kFloat32), reference = run(flow::kFloat64);
      ASSERT_EQ(single.size(), reference.size());
      for (size_t i = 0; i < single.size(); ++i) {
        SCOPED_TRACE(::testing::Message() << "shape " << shape << " affine " << affine << " result " << i);
        expect_close(single[i], reference[i], 1e-4, 1e-4);
      }
    }
  }
}

TEST(BatchNormOps, Gradients) {
  flow::manual_seed(43);
  for (const Shape& shape : {Shape{4, 3}, Shape{2, 3, 2, 3}}) {
    Tensor running_mean = flow::randn({3}, flow::kFloat64), running_var = flow::rand({3}, flow::kFloat64) + 0.5;
    EXPECT_TRUE(gradcheck([&](const TensorList& v) { return flow::batch_norm_eval(v[0], running_mean, running_var, v[1], v[2], 1e-3); },
                          {grad_input(shape), grad_input({3}), grad_input({3})}));
    EXPECT_TRUE(
        gradcheck([&](const TensorList& v) { return flow::batch_norm_eval(v[0], running_mean, running_var); }, {grad_input(shape)}));
    // Every output of the training op, so the paths through mean and invstd are checked too.
    auto train_outputs = [](const flow::BatchNormTrainResult& r) { return flow::cat({r.out.reshape({-1}), r.mean, r.invstd}); };
    EXPECT_TRUE(gradcheck([&](const TensorList& v) { return train_outputs(flow::batch_norm_train(v[0], v[1], v[2], 1e-3)); },
                          {grad_input(shape), grad_input({3}), grad_input({3})}));
    EXPECT_TRUE(gradcheck([&](const TensorList& v) { return train_outputs(flow::batch_norm_train(v[0])); }, {grad_input(shape)}));
  }
}

TEST(BatchNormOps, TrainingStepUpdatesRunningStats) {
  flow::manual_seed(44);
  const double momentum = 0.3, eps = 1e-5;
  for (flow::DType dtype : {flow::kFloat32, flow::kFloat64}) {
    Tensor x = (flow::randn({4, 3, 2, 5}) * 3 + 2).to(dtype);
    Tensor running_mean = flow::randn({3}).to(dtype), running_var = flow::rand({3}).to(dtype) + 1;
    const auto old_mean = values(running_mean), old_var = values(running_var);
    Tensor weight = flow::randn({3}).to(dtype).requires_grad_(), bias = flow::randn({3}).to(dtype).requires_grad_();
    const Tensor y = flow::nn::functional::batch_norm(x, running_mean, running_var, weight, bias, true, momentum, eps);
    const auto [mean, var] = reference_stats(x);
    const double count = 4 * 2 * 5;
    std::vector<double> expected_mean, expected_var;
    for (size_t c = 0; c < 3; ++c) {
      expected_mean.push_back((1 - momentum) * old_mean[c] + momentum * mean[c]);
      expected_var.push_back((1 - momentum) * old_var[c] + momentum * var[c] * count / (count - 1));
    }
    expect_close(running_mean, flow::tensor(expected_mean, Shape{3}), 1e-5, 1e-6);
    expect_close(running_var, flow::tensor(expected_var, Shape{3}), 1e-5, 1e-6);
    EXPECT_FALSE(running_mean.requires_grad());
    EXPECT_TRUE(y.requires_grad());
    expect_close(y, reference_normalize(x, mean, invstd_of(var, eps), values(weight), values(bias)), 1e-4, 1e-5);
  }
}

TEST(BatchNormOps, Errors) {
  namespace F = flow::nn::functional;
  const Tensor x = flow::zeros({2, 3, 4}), three = flow::ones({3}), four = flow::ones({4});
  EXPECT_THROW_MSG(flow::batch_norm_eval(x, four, three), "[batch_norm] running_mean should have shape (3,), one value per channel");
  EXPECT_THROW_MSG(flow::batch_norm_eval(x, three, four), "[batch_norm] running_var should have shape (3,)");
  EXPECT_THROW_MSG(flow::batch_norm_eval(x, three, three, four, three), "[batch_norm] weight should have shape (3,)");
  EXPECT_THROW_MSG(flow::batch_norm_train(x, three, four), "[batch_norm] bias should have shape (3,)");
  EXPECT_THROW_MSG(flow::batch_norm_eval(x, three, three.to(flow::kFloat64)),
                   "[batch_norm] running_var has dtype float64 but input has float32");
  EXPECT_THROW_MSG(F::batch_norm(x, four, four, Tensor(), Tensor(), true), "[batch_norm] running statistics should have shape (3,)");
  EXPECT_THROW_MSG(F::batch_norm(x, four, four), "[batch_norm] running_mean should have shape (3,)");
  EXPECT_THROW_MSG(F::batch_norm(flow::zeros({1, 3}), three, three, Tensor(), Tensor(), true),
                   "[batch_norm] expected more than 1 value per channel when training, got input (1,3)");
  EXPECT_THROW_MSG(flow::batch_norm_train(flow::zeros({1, 3, 1})), "[batch_norm] expected more than 1 value per channel");
  EXPECT_THROW_MSG(flow::batch_norm_train(flow::zeros({3})), "[batch_norm] expected input with a channel dim (N,C,...), got (3,)");
  EXPECT_THROW_MSG(flow::batch_norm_train(flow::zeros({2, 3}, flow::kInt64)), "[batch_norm] expected a floating input, got int64");
  EXPECT_THROW_MSG(flow::batch_norm_eval(x, Tensor(), three), "[batch_norm] running_mean and running_var are needed");
}
