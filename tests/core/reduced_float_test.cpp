// float16/bfloat16 on the CPU: ops without 16-bit kernels widen to float32, run the float32
// kernel and round once, so each result equals the float32 op on the widened inputs, rounded.
// bfloat16 products (matmul, linear, convolution) run on oneDNN where the CPU multiplies bfloat16
// (AVX512-BF16, AMX): float32 accumulation in another order, the same rounding at the end.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/reference.h"
#include "common/test_util.h"
#include "core/flow.h"
#include "core/kernels/cpu/reduced_float.h"

using flow::Tensor;

namespace {

void expect_same_bits(const Tensor& actual, const Tensor& expected) {
  ASSERT_EQ(actual.dtype(), expected.dtype());
  ASSERT_EQ(actual.shape(), expected.shape());
  EXPECT_EQ(actual.to(flow::kFloat32).tolist<float>(), expected.to(flow::kFloat32).tolist<float>());
}

}  // namespace

TEST(ReducedFloat, OpsEqualTheFloat32OpOnWidenedInputsRoundedOnce) {
  flow::manual_seed(3);
  for (flow::DType dtype : {flow::kBFloat16, flow::kFloat16}) {
    const Tensor a = (flow::randn({6, 5}) * 3).to(dtype), b = flow::randn({5, 4}).to(dtype);
    const Tensor c = flow::randn({6, 5}).to(dtype), bias = flow::randn({4}).to(dtype);
    const Tensor wa = a.to(flow::kFloat32), wb = b.to(flow::kFloat32), wc = c.to(flow::kFloat32), wbias = bias.to(flow::kFloat32);
    SCOPED_TRACE(flow::dtype_name(dtype));
    if (dtype == flow::kFloat16) {
      expect_same_bits(flow::matmul(a, b), flow::matmul(wa, wb).to(dtype));
      expect_same_bits(flow::linear(a, b.t(), bias), flow::linear(wa, wb.t(), wbias).to(dtype));
      expect_same_bits(flow::matmul(a.t(), c), flow::matmul(wa.t(), wc).to(dtype));
    }
    expect_same_bits(a + c, (wa + wc).to(dtype));
    expect_same_bits(a * c, (wa * wc).to(dtype));
    expect_same_bits(flow::relu(a), flow::relu(wa).to(dtype));
    expect_same_bits(flow::exp(c), flow::exp(wc).to(dtype));
    expect_same_bits(flow::sum(a, {0}), flow::sum(wa, {0}).to(dtype));
    expect_same_bits(flow::softmax(a, 1), flow::softmax(wa, 1).to(dtype));
    expect_same_bits(flow::argmax(a, 1), flow::argmax(wa, 1));
  }
}

TEST(ReducedFloat, BFloat16SumsEqualTheWidenedSumBitwise) {
  // bfloat16 sums read their input in place and accumulate in float32: the float32 sum of the
  // widened input, rounded once, in every layout of the reduction engine (runs reduced, rows
  // kept, a few long reductions split in chunks) and with a NaN.
  flow::manual_seed(5);
  struct Case {
    flow::Shape shape;
    std::vector<int64_t> dims;
  };
  for (const Case& c : {Case{{64, 8, 13, 13}, {0, 2, 3}}, Case{{64, 512}, {0}}, Case{{3, 70000}, {1}}, Case{{2, 3, 4}, {0, 1, 2}},
                        Case{{6, 1, 5}, {1}}}) {
    SCOPED_TRACE(::testing::Message() << c.shape);
    Tensor x = (flow::randn(c.shape) * 4).to(flow::kBFloat16);
    expect_same_bits(flow::sum(x, c.dims), flow::sum(x.to(flow::kFloat32), c.dims).to(flow::kBFloat16));
  }
  Tensor with_nan = flow::randn({4, 40}).contiguous();
  static_cast<float*>(with_nan.data_ptr())[45] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> sums = flow::sum(with_nan.to(flow::kBFloat16), {1}).to(flow::kFloat32).tolist<float>();
  EXPECT_TRUE(std::isnan(sums[1]));
  EXPECT_FALSE(std::isnan(sums[0]) || std::isnan(sums[2]));
}

TEST(ReducedFloat, BFloat16ProductsOfAnyLayoutMatchFloat32) {
  flow::manual_seed(5);
  const auto bf16 = [](const Tensor& t) { return t.to(flow::kBFloat16); };
  const auto wide = [](const Tensor& t) { return t.to(flow::kFloat32); };
  const Tensor a = bf16(flow::randn({6, 40}) * 3), b = bf16(flow::randn({40, 24})), bias = bf16(flow::randn({24}));
  flow::testing::expect_bfloat16_product(flow::matmul(a, b), flow::matmul(wide(a), wide(b)));
  // Transposed operands (columns contiguous), a sliced one (rows strided), a single row and column.
  const Tensor at = bf16(flow::randn({40, 6})), bt = bf16(flow::randn({24, 40})), wider = bf16(flow::randn({6, 80}));
  flow::testing::expect_bfloat16_product(flow::matmul(at.t(), bt.t()), flow::matmul(wide(at).t(), wide(bt).t()));
  const Tensor sliced = wider.slice(1, 10, 50);
  flow::testing::expect_bfloat16_product(flow::matmul(sliced, b), flow::matmul(wide(sliced), wide(b)));
  const Tensor every_other = wider.slice(1, 0, 80, 2);  // neither rows nor columns contiguous: copied
  flow::testing::expect_bfloat16_product(flow::matmul(every_other, b), flow::matmul(wide(every_other), wide(b)));
  flow::testing::expect_bfloat16_product(flow::matmul(a.slice(0, 2, 3), b), flow::matmul(wide(a).slice(0, 2, 3), wide(b)));
  flow::testing::expect_bfloat16_product(flow::matmul(a, b.slice(1, 5, 6)), flow::matmul(wide(a), wide(b).slice(1, 5, 6)));
  // Batches, one operand broadcast over them.
  const Tensor batched = bf16(flow::randn({3, 1, 6, 40}));
  const Tensor weights = bf16(flow::randn({4, 40, 24}));
  flow::testing::expect_bfloat16_product(flow::matmul(batched, weights), flow::matmul(wide(batched), wide(weights)));
  // linear: 3-d input, with and without bias, and an empty batch.
  const Tensor x = bf16(flow::randn({2, 5, 40})), w = bf16(flow::randn({24, 40}));
  flow::testing::expect_bfloat16_product(flow::linear(x, w, bias), flow::linear(wide(x), wide(w), wide(bias)));
  flow::testing::expect_bfloat16_product(flow::linear(x, w), flow::linear(wide(x), wide(w)));
  EXPECT_EQ(flow::linear(bf16(flow::randn({0, 40})), w, bias).shape(), flow::Shape({0, 24}));
  // k = 0: zeros.
  expect_same_bits(flow::matmul(bf16(flow::randn({3, 0})), bf16(flow::randn({0, 2}))), bf16(flow::zeros({3, 2})));
}

TEST(ReducedFloat, ConvolutionAndPoolingRunInBFloat16) {
  flow::manual_seed(4);
  const Tensor x = flow::randn({2, 3, 8, 8}).to(flow::kBFloat16), w = flow::randn({4, 3, 3, 3}).to(flow::kBFloat16);
  const Tensor wide = flow::conv2d(x.to(flow::kFloat32), w.to(flow::kFloat32));
  const Tensor y = flow::conv2d(x, w);
  flow::testing::expect_bfloat16_product(y, wide);
  expect_same_bits(flow::max_pool2d(y, {2, 2}), flow::max_pool2d(y.to(flow::kFloat32), {2, 2}).to(flow::kBFloat16));
}

// relu, its gradient and max pooling select values, so their bfloat16 kernels (no widening) give
// the float32 kernels' results bit for bit; pooling gradients of overlapping windows sum in float32.
TEST(ReducedFloat, BFloat16SelectionsEqualFloat32Bitwise) {
  flow::manual_seed(7);
  const auto bf16 = [](const Tensor& t) { return t.to(flow::kBFloat16); };
  const auto wide = [](const Tensor& t) { return t.to(flow::kFloat32); };
  const Tensor g = bf16(flow::randn({2, 3, 9, 8})), y = bf16(flow::randn({2, 3, 9, 8}));
  const flow::OpDef& relu_grad = flow::find_op("relu_grad");
  expect_same_bits(flow::apply(relu_grad, {g, y}).at(0), bf16(flow::apply(relu_grad, {wide(g), wide(y)}).at(0)));
  struct Window {
    std::vector<int64_t> kernel, stride, padding;
  };
  for (const Window& w : {Window{{2, 2}, {2, 2}, {0, 0}}, Window{{3, 3}, {2, 2}, {1, 1}}, Window{{2, 3}, {1, 2}, {1, 0}}}) {
    const flow::Attrs attrs = flow::Attrs().set("kernel_size", w.kernel).set("stride", w.stride).set("padding", w.padding);
    const flow::TensorList half = flow::apply(flow::find_op("max_pool2d"), {y}, attrs);
    const flow::TensorList full = flow::apply(flow::find_op("max_pool2d"), {wide(y)}, attrs);
    expect_same_bits(half.at(0), bf16(full.at(0)));
    EXPECT_EQ(half.at(1).tolist<int64_t>(), full.at(1).tolist<int64_t>());
    const Tensor dy = bf16(flow::randn(half.at(0).shape()));
    const flow::OpDef& grad = flow::find_op("max_pool2d_grad");
    const flow::Attrs grad_attrs = flow::Attrs(attrs).set("input_shape", y.shape().vec());
    expect_same_bits(flow::apply(grad, {dy, half.at(1)}, grad_attrs).at(0), bf16(flow::apply(grad, {wide(dy), full.at(1)}, grad_attrs).at(0)));
  }
}

// bfloat16 GELU and its gradient compute each element in float32 and round once: the float32
// kernels' results on the widened inputs, rounded, bit for bit, in both forms, for contiguous
// tensors of any length (the vector loops' tails) and for strided and broadcast ones.
TEST(ReducedFloat, BFloat16GeluAndItsGradientEqualTheWidenedFloat32KernelsBitwise) {
  flow::manual_seed(11);
  const auto bf16 = [](const Tensor& t) { return t.to(flow::kBFloat16); };
  const auto wide = [](const Tensor& t) { return t.to(flow::kFloat32); };
  const flow::OpDef& gelu_grad = flow::find_op("gelu_grad");
  for (const std::string approximate : {"tanh", "none"}) {
    const flow::Attrs attrs = flow::Attrs().set("approximate", approximate);
    for (int64_t n : {1, 15, 16, 17, 1000, 40000, 70001}) {
      SCOPED_TRACE(::testing::Message() << approximate << " " << n);
      Tensor x = flow::randn({n}) * 4;
      if (n > 16) static_cast<float*>(x.data_ptr())[16] = std::numeric_limits<float>::quiet_NaN();
      const Tensor xb = bf16(x), g = bf16(flow::randn({n}));
      flow::testing::expect_same_bytes(flow::gelu(xb, approximate), bf16(flow::gelu(wide(xb), approximate)));
      flow::testing::expect_same_bytes(flow::apply_one(gelu_grad, {g, xb}, attrs), bf16(flow::apply_one(gelu_grad, {wide(g), wide(xb)}, attrs)));
    }
    const Tensor strided = bf16(flow::randn({6, 40})).t(), row = bf16(flow::randn({1, 6}));
    flow::testing::expect_same_bytes(flow::gelu(strided, approximate), bf16(flow::gelu(wide(strided), approximate)));
    flow::testing::expect_same_bytes(flow::apply_one(gelu_grad, {row, strided}, attrs), bf16(flow::apply_one(gelu_grad, {wide(row), wide(strided)}, attrs)));
  }
}

TEST(ReducedFloat, InPlaceKernelsWriteTheirWidenedInput) {
  // An in-place float32 kernel doubling its input, run on a bfloat16 tensor through the adapter.
  const flow::KernelFn twice = flow::cpu::computed_in_float32([](flow::KernelContext& ctx) {
    float* data = ctx.outputs[0].data_ptr<float>();
    EXPECT_EQ(data, ctx.inputs[0].data_ptr<float>());
    for (int64_t i = 0; i < ctx.outputs[0].numel(); ++i) data[i] *= 2;
  });
  Tensor t = flow::tensor<float>({1.5f, -3.f, 0.25f}).to(flow::kBFloat16);
  flow::TensorList inputs{t}, outputs{t};
  const flow::Attrs attrs;
  flow::KernelContext ctx{inputs, outputs, attrs};
  twice(ctx);
  EXPECT_EQ(t.to(flow::kFloat32).tolist<float>(), (std::vector<float>{3.f, -6.f, 0.5f}));
}
