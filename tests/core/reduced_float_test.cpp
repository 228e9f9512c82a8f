// float16/bfloat16 on the CPU: ops without 16-bit kernels widen to float32, run the float32
// kernel and round once, so each result equals the float32 op on the widened inputs, rounded.
#include <gtest/gtest.h>

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
    expect_same_bits(flow::matmul(a, b), flow::matmul(wa, wb).to(dtype));
    expect_same_bits(flow::linear(a, b.t(), bias), flow::linear(wa, wb.t(), wbias).to(dtype));
    expect_same_bits(a + c, (wa + wc).to(dtype));
    expect_same_bits(a * c, (wa * wc).to(dtype));
    expect_same_bits(flow::relu(a), flow::relu(wa).to(dtype));
    expect_same_bits(flow::exp(c), flow::exp(wc).to(dtype));
    expect_same_bits(flow::sum(a, {0}), flow::sum(wa, {0}).to(dtype));
    expect_same_bits(flow::softmax(a, 1), flow::softmax(wa, 1).to(dtype));
    expect_same_bits(flow::argmax(a, 1), flow::argmax(wa, 1));
    // Strided operands (a transposed view) are widened to contiguous float32 copies.
    expect_same_bits(flow::matmul(a.t(), c), flow::matmul(wa.t(), wc).to(dtype));
  }
}

TEST(ReducedFloat, ConvolutionAndPoolingRunInBFloat16) {
  flow::manual_seed(4);
  const Tensor x = flow::randn({2, 3, 8, 8}).to(flow::kBFloat16), w = flow::randn({4, 3, 3, 3}).to(flow::kBFloat16);
  const Tensor wide = flow::conv2d(x.to(flow::kFloat32), w.to(flow::kFloat32));
  const Tensor y = flow::conv2d(x, w);
  expect_same_bits(y, wide.to(flow::kBFloat16));
  expect_same_bits(flow::max_pool2d(y, {2, 2}), flow::max_pool2d(y.to(flow::kFloat32), {2, 2}).to(flow::kBFloat16));
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
