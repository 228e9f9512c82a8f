#include <gtest/gtest.h>

#include <cmath>

#include "common/reference.h"
#include "common/test_util.h"

using flow::Tensor;

namespace {
Tensor reference_softmax(const Tensor& x, int64_t dim, bool log_output) {
  Tensor shifted = x.to(flow::kFloat64) - std::get<0>(std::make_tuple(flow::max(x.to(flow::kFloat64), dim, true).values));
  Tensor e = flow::exp(shifted);
  Tensor s = flow::sum(e, {dim}, true);
  return log_output ? shifted - flow::log(s) : e / s;
}
}  // namespace

TEST(Softmax, MatchesReferenceAlongEveryDim) {
  flow::manual_seed(6);
  for (flow::DType dtype : {flow::kFloat32, flow::kFloat64}) {
    Tensor x = flow::randn({3, 4, 5}, dtype) * 5;
    for (int64_t dim : {0, 1, 2, -1}) {
      flow::testing::expect_close(flow::softmax(x, dim), reference_softmax(x, dim, false), 1e-5, 1e-7);
      flow::testing::expect_close(flow::log_softmax(x, dim), reference_softmax(x, dim, true), 1e-5, 1e-6);
      flow::testing::expect_close(flow::sum(flow::softmax(x, dim), {dim}), flow::ones_like(flow::sum(x, {dim})), 1e-5);
    }
    Tensor view = x.transpose(0, 2);
    flow::testing::expect_close(view.softmax(1), reference_softmax(view, 1, false), 1e-5, 1e-7);
  }
}

TEST(Softmax, StableForLargeValues) {
  auto x = flow::tensor<float>({1000, 1000, -1000});
  auto y = flow::softmax(x, 0).tolist<float>();
  EXPECT_FLOAT_EQ(y[0], 0.5f);
  EXPECT_FLOAT_EQ(y[2], 0.f);
  EXPECT_NEAR(flow::log_softmax(x, 0).tolist<float>()[0], -std::log(2.f), 1e-6);
}

// Long float32 rows (GPT-2's vocabulary and more) against float64: the largest relative error of
// any probability stays at float32's rounding, as PyTorch's (about 2e-6 at 16,384 columns; a
// float32 running sum gave 1.7e-5).
TEST(Softmax, Float32AccurateOverLongRows) {
  flow::manual_seed(7);
  for (int64_t columns : {16384, 50257}) {
    const Tensor x = flow::randn({4, columns}) * 3;
    const Tensor wide = x.to(flow::kFloat64);
    const double relative = flow::max(flow::abs(flow::softmax(x, 1).to(flow::kFloat64) / reference_softmax(wide, 1, false) - 1)).item<double>();
    EXPECT_LT(relative, 2e-6) << columns << " columns";
    const double absolute = flow::max(flow::abs(flow::log_softmax(x, 1).to(flow::kFloat64) - reference_softmax(wide, 1, true))).item<double>();
    EXPECT_LT(absolute, 5e-6) << columns << " columns";
  }
}

TEST(Softmax, Errors) {
  EXPECT_THROW_MSG(flow::softmax(flow::zeros({2, 3}), 2), "[softmax] dim 2 out of range");
  EXPECT_THROW_MSG(flow::log_softmax(flow::arange(3), 0), "[log_softmax] expected a floating point input, got int64");
}
