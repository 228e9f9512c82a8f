#include <gtest/gtest.h>

#include <cmath>
#include <limits>

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
Tensor bf16(const Tensor& t) { return t.to(flow::kBFloat16); }
Tensor wide(const Tensor& t) { return t.to(flow::kFloat32); }

// Rows of every length class of the kernels: shorter than a vector of 16, whole vectors, a tail,
// one and more blocks of 1024 with a tail, GPT-2's vocabulary; a row with NaN and one of -inf.
std::vector<Tensor> bfloat16_inputs() {
  std::vector<Tensor> inputs;
  for (int64_t n : {1, 7, 16, 17, 1000, 1024, 1025, 3000, 50257}) inputs.push_back(bf16(flow::randn({3, n}) * 4));
  Tensor special = flow::randn({3, 40}).contiguous();
  static_cast<float*>(special.data_ptr())[5] = std::numeric_limits<float>::quiet_NaN();
  for (int64_t i = 40; i < 80; ++i) static_cast<float*>(special.data_ptr())[i] = -std::numeric_limits<float>::infinity();
  inputs.push_back(bf16(special));
  return inputs;
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

// bfloat16 rows are read and written by the kernels directly, each element widened as read and
// rounded once as written: the float32 kernel's result on the widened input, bit for bit, for a
// bfloat16 output, a float32 one (dtype), and both gradient kernels, along the last dim and another.
TEST(Softmax, BFloat16KernelsEqualTheFloat32KernelOnWidenedInputsBitwise) {
  flow::manual_seed(8);
  const flow::OpDef& softmax_grad = flow::find_op("softmax_grad");
  const flow::OpDef& log_softmax_grad = flow::find_op("log_softmax_grad");
  for (const Tensor& x : bfloat16_inputs()) {
    SCOPED_TRACE(::testing::Message() << x.shape());
    for (int64_t dim : {1, 0}) {
      const Tensor s = flow::softmax(wide(x), dim), l = flow::log_softmax(wide(x), dim);
      flow::testing::expect_same_bytes(flow::softmax(x, dim), bf16(s));
      flow::testing::expect_same_bytes(flow::log_softmax(x, dim), bf16(l));
      flow::testing::expect_same_bytes(flow::softmax(x, dim, flow::kFloat32), s);
      flow::testing::expect_same_bytes(flow::log_softmax(x, dim, flow::kFloat32), l);
      const Tensor g = flow::randn(x.shape());
      const flow::Attrs attrs = flow::Attrs().set("dim", dim);
      const flow::Attrs to_bf16 = flow::Attrs(attrs).set("dtype", flow::kBFloat16);
      for (const auto& [op, y] : {std::pair{&softmax_grad, s}, std::pair{&log_softmax_grad, l}}) {
        SCOPED_TRACE(op->name);
        const Tensor float32_grad = flow::apply_one(*op, {g, y}, attrs);
        flow::testing::expect_same_bytes(flow::apply_one(*op, {g, y}, to_bf16), bf16(float32_grad));
        flow::testing::expect_same_bytes(flow::apply_one(*op, {bf16(g), bf16(y)}, attrs), bf16(flow::apply_one(*op, {wide(bf16(g)), wide(bf16(y))}, attrs)));
      }
    }
  }
}

TEST(Softmax, DtypeArgument) {
  flow::manual_seed(10);
  const Tensor x = flow::randn({2, 6});
  // Any other dtype casts first, as PyTorch's dtype argument.
  flow::testing::expect_same_bytes(flow::softmax(x, 1, flow::kFloat64), flow::softmax(x.to(flow::kFloat64), 1));
  flow::testing::expect_same_bytes(flow::log_softmax(x, 1, flow::kBFloat16), flow::log_softmax(bf16(x), 1));
  flow::testing::expect_same_bytes(flow::log_softmax(x, 1, flow::kFloat32), flow::log_softmax(x, 1));
  const flow::Attrs attrs = flow::Attrs().set("dim", int64_t{1}).set("dtype", flow::kFloat64);
  EXPECT_THROW_MSG(flow::apply_one(flow::find_op("log_softmax"), {bf16(x)}, attrs),
                   "[log_softmax] dtype float64 with bfloat16 tensors: a float16/bfloat16 input and a float32 output are the only mix");
  EXPECT_THROW_MSG(flow::apply_one(flow::find_op("softmax_grad"), {x, x}, flow::Attrs(attrs).set("dtype", flow::kFloat64)),
                   "[softmax_grad] dtype float64 with float32 tensors");
}

TEST(Softmax, Errors) {
  EXPECT_THROW_MSG(flow::softmax(flow::zeros({2, 3}), 2), "[softmax] dim 2 out of range");
  EXPECT_THROW_MSG(flow::log_softmax(flow::arange(3), 0), "[log_softmax] expected a floating point input, got int64");
}
