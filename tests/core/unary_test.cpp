#include <gtest/gtest.h>

#include <cmath>

#include "common/reference.h"
#include "common/test_util.h"

using flow::Tensor;
using flow::testing::expect_close;
using flow::testing::reference_unary;

namespace {
struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> reference;
  double low, high;
};

std::vector<UnaryCase> cases() {
  return {
      {"neg", [](const Tensor& x) { return flow::neg(x); }, [](double x) { return -x; }, -3, 3},
      {"abs", [](const Tensor& x) { return flow::abs(x); }, [](double x) { return std::abs(x); }, -3, 3},
      {"exp", [](const Tensor& x) { return flow::exp(x); }, [](double x) { return std::exp(x); }, -3, 3},
      {"log", [](const Tensor& x) { return flow::log(x); }, [](double x) { return std::log(x); }, 0.1, 5},
      {"sqrt", [](const Tensor& x) { return flow::sqrt(x); }, [](double x) { return std::sqrt(x); }, 0, 5},
      {"rsqrt", [](const Tensor& x) { return flow::rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); }, 0.1, 5},
      {"sin", [](const Tensor& x) { return flow::sin(x); }, [](double x) { return std::sin(x); }, -3, 3},
      {"cos", [](const Tensor& x) { return flow::cos(x); }, [](double x) { return std::cos(x); }, -3, 3},
      {"tanh", [](const Tensor& x) { return flow::tanh(x); }, [](double x) { return std::tanh(x); }, -3, 3},
      {"sigmoid", [](const Tensor& x) { return flow::sigmoid(x); }, [](double x) { return 1 / (1 + std::exp(-x)); }, -5, 5},
      {"relu", [](const Tensor& x) { return flow::relu(x); }, [](double x) { return x < 0 ? 0 : x; }, -3, 3},
      {"gelu", [](const Tensor& x) { return flow::gelu(x); },
       [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, -3, 3},
      {"gelu_tanh", [](const Tensor& x) { return flow::gelu(x, "tanh"); },
       [](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }, -3, 3},
      {"silu", [](const Tensor& x) { return flow::silu(x); }, [](double x) { return x / (1 + std::exp(-x)); }, -3, 3},
      {"clamp", [](const Tensor& x) { return flow::clamp(x, -0.5, 1.0); },
       [](double x) { return std::min(1.0, std::max(-0.5, x)); }, -3, 3},
      {"clamp_min", [](const Tensor& x) { return flow::clamp(x, 0.25, std::nullopt); },
       [](double x) { return std::max(0.25, x); }, -3, 3},
      {"softplus", [](const Tensor& x) { return flow::softplus(x); }, [](double x) { return std::log(1 + std::exp(x)); }, -5, 5},
      // Both sides of the threshold: linear where 2x > 1.
      {"softplus_beta_threshold", [](const Tensor& x) { return flow::softplus(x, 2, 1); },
       [](double x) { return 2 * x > 1 ? x : std::log(1 + std::exp(2 * x)) / 2; }, -3, 3},
  };
}
}  // namespace

TEST(Unary, MatchesDoubleReferenceOnShapesAndViews) {
  flow::manual_seed(0);
  for (const auto& c : cases()) {
    for (flow::DType dtype : {flow::kFloat32, flow::kFloat64}) {
      for (const flow::Shape& shape : std::vector<flow::Shape>{{}, {1}, {17}, {4, 5}, {0, 3}, {3, 70000}}) {
        Tensor x = flow::rand(shape, dtype) * (c.high - c.low) + c.low;
        SCOPED_TRACE(std::string(c.name) + " " + flow::dtype_name(dtype) + " " + shape.str());
        Tensor y = c.op(x);
        EXPECT_EQ(y.dtype(), dtype);
        expect_close(y, reference_unary(x, c.reference), dtype == flow::kFloat32 ? 2e-6 : 1e-12, 1e-6);
      }
      // Non-contiguous input: a transposed slice.
      Tensor base = flow::rand({6, 8}, dtype) * (c.high - c.low) + c.low;
      Tensor view = base.t().slice(0, 1, 7, 2);
      expect_close(c.op(view), reference_unary(view, c.reference), dtype == flow::kFloat32 ? 2e-6 : 1e-12, 1e-6);
    }
  }
}

TEST(Unary, GeluFloat32KeepsRelativeAccuracyInTheTails) {
  // float32 GELU evaluates 1 + erf as erfc without cancellation, so its relative error stays
  // small where the value is tiny (1 + erf in float32 would round to 0 below x = -6 or so).
  std::vector<float> xs;
  for (int i = -1000; i <= 1000; ++i) xs.push_back(static_cast<float>(i) * 0.01f);
  const Tensor x = flow::tensor<float>(xs);
  const std::vector<float> y = flow::gelu(x).tolist<float>();
  const Tensor grad = flow::ones({static_cast<int64_t>(xs.size())});
  const std::vector<float> dy = flow::apply_one(flow::find_op("gelu_grad"), {grad, x}, flow::Attrs().set("approximate", std::string("none"))).tolist<float>();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double v = xs[i], cdf = 0.5 * std::erfc(-v / std::sqrt(2.0));
    const double expected = v * cdf, expected_grad = cdf + v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
    if (std::abs(expected) > 1e-30) {
      EXPECT_NEAR(y[i] / expected, 1.0, 2e-5) << "gelu(" << v << ")";
    }
    EXPECT_NEAR(dy[i], expected_grad, 1e-6) << "gelu'(" << v << ")";
  }
  EXPECT_LT(flow::gelu(flow::tensor<float>({-8.0f})).item<float>(), 0.0f);  // not rounded to 0
  const std::vector<float> special = flow::gelu(flow::tensor<float>({NAN, INFINITY, -100.0f, 100.0f})).tolist<float>();
  EXPECT_TRUE(std::isnan(special[0]));
  EXPECT_EQ(special[1], INFINITY);
  EXPECT_EQ(special[2], 0.0f);
  EXPECT_EQ(special[3], 100.0f);
}

TEST(Unary, IntegerInputs) {
  auto i = flow::tensor<int64_t>({-3, 0, 4});
  EXPECT_EQ(flow::neg(i).tolist<int64_t>(), (std::vector<int64_t>{3, 0, -4}));
  EXPECT_EQ(flow::abs(i).dtype(), flow::kInt64);
  EXPECT_EQ(flow::relu(i).tolist<int64_t>(), (std::vector<int64_t>{0, 0, 4}));
  EXPECT_EQ(flow::clamp(i, -1, 2).tolist<int64_t>(), (std::vector<int64_t>{-1, 0, 2}));
  auto e = flow::exp(i);  // floating function of an integer tensor computes in float32
  EXPECT_EQ(e.dtype(), flow::kFloat32);
  EXPECT_NEAR(e.tolist<float>()[2], std::exp(4.0), 1e-3);
  EXPECT_EQ(flow::clamp(i, 0.5, std::nullopt).dtype(), flow::kFloat32);
  EXPECT_EQ(flow::sign(flow::tensor<float>({-2, 0, 3})).tolist<float>(), (std::vector<float>{-1, 0, 1}));
  EXPECT_EQ(flow::logical_not(flow::tensor<int32_t>({0, 5})).tolist<bool>(), (std::vector<bool>{true, false}));
}

TEST(Unary, SoftplusIsLinearAboveTheThresholdAndFiniteEverywhere) {
  const auto y = flow::softplus(flow::tensor<float>({100, 20, 20.5f, -100, 0})).tolist<float>();
  EXPECT_EQ(y[0], 100.f);                          // exp(100) overflows float32: the linear branch
  EXPECT_FLOAT_EQ(y[1], std::log1p(std::exp(20.f)));  // 20 is not above the threshold 20
  EXPECT_EQ(y[2], 20.5f);
  EXPECT_FLOAT_EQ(y[3], std::log1p(std::exp(-100.f)));
  EXPECT_FLOAT_EQ(y[4], std::log(2.f));
  // beta scales the threshold's test: 0.5 * 30 = 15 <= 20 stays on the log branch.
  EXPECT_NEAR(flow::softplus(flow::tensor<double>({30}), 0.5).item<double>(), std::log1p(std::exp(15.0)) / 0.5, 1e-12);
  EXPECT_EQ(flow::softplus(flow::tensor<int64_t>({0})).dtype(), flow::kFloat32);
}

TEST(Unary, NanPropagates) {
  auto x = flow::tensor<float>({NAN, -1.f});
  EXPECT_TRUE(std::isnan(flow::relu(x).tolist<float>()[0]));
  EXPECT_TRUE(std::isnan(flow::clamp(x, 0, 1).tolist<float>()[0]));
}

TEST(Unary, Errors) {
  EXPECT_THROW_MSG(flow::gelu(flow::zeros({2}), "fast"), "[gelu] approximate must be 'none' or 'tanh'");
  EXPECT_THROW_MSG(flow::clamp(flow::zeros({2}), std::nullopt, std::nullopt), "[clamp] at least one of min or max");
  EXPECT_THROW_MSG(flow::neg(flow::tensor<bool>({true})), "[neg] not supported for bool tensors");
}
