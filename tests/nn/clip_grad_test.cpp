// nn::utils::clip_grad_norm_ and clip_grad_value_ against norms computed by hand: gradients
// (3, -4) and (0, 12), whose 2-norm is 13, 1-norm 19, inf-norm 12.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/test_util.h"
#include "core/flow.h"
#include "nn/modules.h"
#include "nn/utils/clip_grad.h"

namespace utils = flow::nn::utils;
using flow::Tensor;
using flow::TensorList;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor param_with_grad(const std::vector<float>& grad, flow::DType dtype = flow::kFloat32) {
  Tensor p = flow::zeros({static_cast<int64_t>(grad.size())}, flow::TensorOptions(dtype)).requires_grad_();
  p.set_grad(flow::tensor(grad).to(dtype));
  return p;
}

TensorList two_params() { return {param_with_grad({3, -4}), param_with_grad({0, 12})}; }

std::vector<double> grad_of(const Tensor& p) { return p.grad().tolist<double>(); }

}  // namespace

TEST(ClipGradNorm, TotalNormOfEachNormType) {
  const double sqrt3 = std::sqrt(3.0);
  // 0.5: (sum sqrt|g|)^2 = (sqrt 3 + 2 + sqrt 12)^2 = 31 + 12 sqrt 3; 3: cube root of 27 + 64 + 1728.
  const std::vector<std::pair<double, double>> cases{{2, 13}, {1, 19}, {kInf, 12}, {0.5, 31 + 12 * sqrt3}, {3, std::cbrt(1819.0)}};
  for (const auto& [norm_type, expected] : cases) {
    const TensorList params = two_params();
    const Tensor total = utils::clip_grad_norm_(params, 1e9, norm_type);
    EXPECT_EQ(total.dim(), 0);
    EXPECT_EQ(total.dtype(), flow::kFloat32);
    EXPECT_NEAR(total.item<double>(), expected, expected * 1e-6) << "norm_type " << norm_type;
    // Far under max_norm: multiplied by exactly 1.
    EXPECT_EQ(grad_of(params[0]), (std::vector<double>{3, -4})) << "norm_type " << norm_type;
    EXPECT_EQ(grad_of(params[1]), (std::vector<double>{0, 12})) << "norm_type " << norm_type;
  }
}

TEST(ClipGradNorm, ScalesEveryGradientByMaxNormOverTheTotalNorm) {
  for (const auto& [norm_type, total] : std::vector<std::pair<double, double>>{{2, 13}, {1, 19}, {kInf, 12}}) {
    const TensorList params = two_params();
    EXPECT_NEAR(utils::clip_grad_norm_(params, 6.5, norm_type).item<double>(), total, 1e-5);
    const double coef = 6.5 / (total + 1e-6);
    const auto g0 = grad_of(params[0]), g1 = grad_of(params[1]);
    EXPECT_NEAR(g0[0], 3 * coef, 1e-6);
    EXPECT_NEAR(g0[1], -4 * coef, 1e-6);
    EXPECT_EQ(g1[0], 0);
    EXPECT_NEAR(g1[1], 12 * coef, 1e-6);
    // The clipped gradients' norm is max_norm (less the 1e-6 guard).
    EXPECT_NEAR(utils::get_total_norm({params[0].grad(), params[1].grad()}, norm_type).item<double>(), 6.5, 1e-5);
  }
}

TEST(ClipGradNorm, ClipsOnlyAboveMaxNorm) {
  const TensorList params = two_params();
  utils::clip_grad_norm_(params, 13.5);
  EXPECT_EQ(grad_of(params[0]), (std::vector<double>{3, -4}));
  EXPECT_EQ(grad_of(params[1]), (std::vector<double>{0, 12}));
  utils::clip_grad_norm_(params, 12.5);
  EXPECT_LT(grad_of(params[1])[1], 12 * (12.5 / 13) + 1e-5);
  EXPECT_GT(grad_of(params[1])[1], 12 * (12.5 / 13) - 1e-5);
}

TEST(ClipGradNorm, SkipsParametersWithoutGradient) {
  Tensor no_grad = flow::full({3}, 100.0).requires_grad_();
  const TensorList params{param_with_grad({3, -4}), no_grad, param_with_grad({0, 12})};
  EXPECT_NEAR(utils::clip_grad_norm_(params, 1.0).item<double>(), 13, 1e-5);
  EXPECT_FALSE(no_grad.grad().defined());
  EXPECT_NEAR(grad_of(params[2])[1], 12 / (13 + 1e-6), 1e-6);
}

TEST(ClipGradNorm, NoGradientsGiveZero) {
  for (const TensorList& params : {TensorList{}, TensorList{flow::zeros({2}).requires_grad_()}}) {
    const Tensor total = utils::clip_grad_norm_(params, 1.0);
    EXPECT_EQ(total.dim(), 0);
    EXPECT_EQ(total.dtype(), flow::kFloat32);
    EXPECT_EQ(total.item<double>(), 0);
  }
}

TEST(ClipGradNorm, OneTensorAndSixteenBitGradients) {
  Tensor p = param_with_grad({3, -4}, flow::kBFloat16);
  const Tensor total = utils::clip_grad_norm_(p, 1.0);
  EXPECT_EQ(total.dtype(), flow::kBFloat16);  // each norm in its gradient's dtype, as in PyTorch
  EXPECT_EQ(total.item<double>(), 5);
  EXPECT_EQ(p.grad().dtype(), flow::kBFloat16);
  EXPECT_NEAR(grad_of(p)[0], 0.6, 0.6 / 128);  // bfloat16 keeps 8 significant bits
  EXPECT_NEAR(grad_of(p)[1], -0.8, 0.8 / 128);
}

TEST(ClipGradNorm, ErrorIfNonfinite) {
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    TensorList params{param_with_grad({3, bad}), param_with_grad({0, 12})};
    EXPECT_THROW_MSG(utils::clip_grad_norm_(params, 1.0, 2.0, true),
                     "[clip_grad_norm_] the total norm of order 2 for gradients from `parameters` is non-finite");
    EXPECT_EQ(grad_of(params[1]), (std::vector<double>{0, 12}));  // nothing was scaled
    // Without the check the gradients are scaled by max_norm / the non-finite norm, as in PyTorch.
    // An inf norm gives the factor 0 (and inf * 0 is NaN), a NaN norm NaN everywhere.
    const Tensor total = utils::clip_grad_norm_(params, 1.0);
    EXPECT_FALSE(std::isfinite(total.item<double>()));
    EXPECT_TRUE(std::isnan(grad_of(params[0])[1]));
    if (std::isinf(bad)) {
      EXPECT_EQ(grad_of(params[0])[0], 0);
      EXPECT_EQ(grad_of(params[1])[1], 0);
    } else {
      EXPECT_TRUE(std::isnan(grad_of(params[0])[0]));
      EXPECT_TRUE(std::isnan(grad_of(params[1])[1]));
    }
  }
  EXPECT_THROW_MSG(utils::get_total_norm({flow::full({2}, kInf)}, kInf, true), "[get_total_norm] the total norm of order inf");
}

TEST(ClipGradNorm, RealGradientsAreClippedOutsideAutograd) {
  flow::manual_seed(0);
  flow::nn::Linear linear(4, 3);
  flow::sum(linear.forward(flow::randn({8, 4})) * 100.0).backward();
  const TensorList params = linear.parameters();
  TensorList grads;
  for (const Tensor& p : params) grads.push_back(p.grad().clone());
  double squares = 0;
  for (const Tensor& g : grads) {
    for (double v : g.tolist<double>()) squares += v * v;
  }
  const Tensor total = utils::clip_grad_norm_(params, 0.5);
  EXPECT_NEAR(total.item<double>(), std::sqrt(squares), std::sqrt(squares) * 1e-6);
  EXPECT_FALSE(total.requires_grad());
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(flow::allclose(params[i].grad(), grads[i] * (0.5 / (std::sqrt(squares) + 1e-6)), 1e-6, 1e-7));
    EXPECT_FALSE(params[i].grad().requires_grad());
  }
  // A gradient that is itself a leaf requiring grad: writing it in place with grad mode on would
  // be an autograd error, so this passes only if the write is not recorded.
  Tensor p = flow::zeros({2}).requires_grad_();
  p.set_grad(flow::tensor(std::vector<float>{3, -4}).requires_grad_());
  utils::clip_grad_norm_(p, 1.0);
  utils::clip_grad_value_(p, 0.5);
  EXPECT_FALSE(p.grad().grad_fn());
}

TEST(ClipGradValue, ClampsEveryGradientElement) {
  Tensor no_grad = flow::zeros({2}).requires_grad_();
  const TensorList params{param_with_grad({3, -4, 0.5f}), no_grad, param_with_grad({-0.25f, 12})};
  utils::clip_grad_value_(params, 1.0);
  EXPECT_EQ(grad_of(params[0]), (std::vector<double>{1, -1, 0.5}));
  EXPECT_EQ(grad_of(params[2]), (std::vector<double>{-0.25, 1}));
  EXPECT_FALSE(no_grad.grad().defined());
  Tensor one = param_with_grad({3, -4});
  utils::clip_grad_value_(one, 0.0);
  EXPECT_EQ(grad_of(one), (std::vector<double>{0, 0}));
}

TEST(ClipGrad, ArgumentErrors) {
  const TensorList params = two_params();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW_MSG(utils::clip_grad_norm_(params, -1.0), "[clip_grad_norm_] max_norm must be non-negative, got -1");
  EXPECT_THROW_MSG(utils::clip_grad_norm_(params, nan), "[clip_grad_norm_] max_norm must be non-negative, got nan");
  for (double norm_type : {0.0, -1.0, -kInf, nan}) {
    EXPECT_THROW_MSG(utils::clip_grad_norm_(params, 1.0, norm_type), "[clip_grad_norm_] norm_type must be positive or inf");
  }
  EXPECT_THROW_MSG(utils::get_total_norm({params[0].grad()}, 0.0), "[get_total_norm] norm_type must be positive or inf, got 0");
  EXPECT_THROW_MSG(utils::clip_grad_norm_({params[0], Tensor()}, 1.0), "[clip_grad_norm_] tensor 1 is undefined");
  EXPECT_THROW_MSG(utils::clip_grad_value_(params, -0.5), "[clip_grad_value_] clip_value must be non-negative, got -0.5");
  EXPECT_THROW_MSG(utils::clip_grad_value_({Tensor()}, 0.5), "[clip_grad_value_] tensor 0 is undefined");
  EXPECT_THROW_MSG(utils::clip_grads_with_norm_(params, 1.0, Tensor()), "[clip_grads_with_norm_] total_norm must be a one-element tensor");
  // Nothing above changed a gradient.
  EXPECT_EQ(grad_of(params[0]), (std::vector<double>{3, -4}));
  EXPECT_EQ(grad_of(params[1]), (std::vector<double>{0, 12}));
}
