// flow::autocast: which ops run in the autocast dtype, which in float32, and that gradients
// reach float32 leaves in float32, computed without autocast.
#include <gtest/gtest.h>

#include "common/reference.h"
#include "common/test_util.h"
#include "core/flow.h"

using flow::Tensor;

TEST(Autocast, ProductsRunInTheAutocastDtypeAndRangeSensitiveOpsInFloat32) {
  flow::manual_seed(1);
  const Tensor x = flow::randn({4, 8}), w = flow::randn({3, 8}), b = flow::randn({3});
  EXPECT_FALSE(flow::is_autocast_enabled());
  {
    const flow::autocast amp;
    EXPECT_TRUE(flow::is_autocast_enabled());
    EXPECT_EQ(flow::autocast_dtype(), flow::kBFloat16);
    const Tensor y = flow::linear(x, w, b);
    EXPECT_EQ(y.dtype(), flow::kBFloat16);
    EXPECT_EQ(flow::matmul(x, w.t()).dtype(), flow::kBFloat16);
    EXPECT_EQ(flow::relu(y).dtype(), flow::kBFloat16);  // neither list: the input's dtype
    EXPECT_EQ(flow::softmax(y, 1).dtype(), flow::kFloat32);
    EXPECT_EQ(flow::log_softmax(y, 1).dtype(), flow::kFloat32);
    EXPECT_EQ(flow::exp(y).dtype(), flow::kFloat32);
    EXPECT_EQ(flow::sum(y).dtype(), flow::kFloat32);
    EXPECT_EQ((y + x.narrow(1, 0, 3)).dtype(), flow::kFloat32);  // promotion, as without autocast
    // float64 is left alone, as in PyTorch.
    EXPECT_EQ(flow::matmul(x.to(flow::kFloat64), w.to(flow::kFloat64).t()).dtype(), flow::kFloat64);
    // The result is the float32 op on inputs rounded to bfloat16, rounded once more (up to the
    // summation order).
    const Tensor expected =
        flow::linear(x.to(flow::kBFloat16).to(flow::kFloat32), w.to(flow::kBFloat16).to(flow::kFloat32), b.to(flow::kBFloat16).to(flow::kFloat32));
    flow::testing::expect_bfloat16_product(y, expected);
    {
      const flow::autocast off(flow::kBFloat16, false);
      EXPECT_FALSE(flow::is_autocast_enabled());
      EXPECT_EQ(flow::linear(x, w, b).dtype(), flow::kFloat32);
    }
    EXPECT_TRUE(flow::is_autocast_enabled());
    const flow::autocast half(flow::kFloat16);
    EXPECT_EQ(flow::linear(x, w, b).dtype(), flow::kFloat16);
  }
  EXPECT_FALSE(flow::is_autocast_enabled());
  EXPECT_EQ(flow::linear(x, w, b).dtype(), flow::kFloat32);
}

// torch.autocast(device_type, dtype): a guard for one device type leaves ops on others alone.
TEST(Autocast, AGuardForOneDeviceTypeCastsOnlyOpsOnIt) {
  flow::manual_seed(3);
  const Tensor x = flow::randn({4, 8}), w = flow::randn({3, 8});
  {
    const flow::autocast cuda_amp("cuda", flow::kFloat16);
    EXPECT_TRUE(flow::is_autocast_enabled());
    EXPECT_TRUE(flow::is_autocast_enabled("cuda"));
    EXPECT_FALSE(flow::is_autocast_enabled(flow::kCPU));
    EXPECT_EQ(flow::autocast_dtype("cuda"), flow::kFloat16);
    EXPECT_EQ(flow::linear(x, w).dtype(), flow::kFloat32);  // CPU tensors: not under the CUDA guard
    {
      const flow::autocast cpu_amp(flow::kCPU);  // PyTorch's CPU default: bfloat16
      EXPECT_EQ(flow::autocast_dtype(flow::kCPU), flow::kBFloat16);
      EXPECT_EQ(flow::linear(x, w).dtype(), flow::kBFloat16);
      EXPECT_EQ(flow::autocast_dtype("cuda"), flow::kFloat16);
    }
    EXPECT_EQ(flow::linear(x, w).dtype(), flow::kFloat32);
    const flow::autocast cpu_off(flow::kCPU, flow::kFloat16, false);
    EXPECT_FALSE(flow::is_autocast_enabled(flow::kCPU));
  }
  EXPECT_FALSE(flow::is_autocast_enabled());
  {
    // The default dtype per device type is PyTorch's: float16 on CUDA.
    const flow::autocast cuda_amp(flow::Device("cuda:1"));
    EXPECT_EQ(flow::autocast_dtype("cuda"), flow::kFloat16);
    // Meta tensors follow the CPU.
    const flow::autocast cpu_amp(flow::kCPU, flow::kFloat16);
    const Tensor on_meta = flow::linear(flow::empty({4, 8}, flow::kMeta), flow::empty({3, 8}, flow::kMeta));
    EXPECT_EQ(on_meta.dtype(), flow::kFloat16);
  }
  EXPECT_THROW_MSG(const flow::autocast bad(flow::kCPU, flow::kFloat64), "[autocast] dtype must be bfloat16 or float16, got float64");
}

TEST(Autocast, RejectsDtypesOtherThanSixteenBitFloats) {
  EXPECT_THROW_MSG(const flow::autocast bad(flow::kFloat32), "[autocast] dtype must be bfloat16 or float16, got float32");
  EXPECT_FALSE(flow::is_autocast_enabled());
}

TEST(Autocast, Float32LeavesGetFloat32GradientsComputedWithoutAutocast) {
  flow::manual_seed(2);
  Tensor w = flow::randn({3, 8}).requires_grad_(), b = flow::randn({3}).requires_grad_();
  const Tensor x = flow::randn({4, 8}), target = flow::randn({4, 3});
  bool autocast_during_backward = true;
  auto handle = w.register_post_accumulate_grad_hook([&](Tensor&) { autocast_during_backward = flow::is_autocast_enabled(); });
  {
    const flow::autocast amp;
    Tensor loss = flow::sum((flow::linear(x, w, b) - target) * (flow::linear(x, w, b) - target));
    EXPECT_EQ(loss.dtype(), flow::kFloat32);
    loss.backward();  // inside the guard: backward still runs without it
  }
  EXPECT_FALSE(autocast_during_backward);
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), flow::kFloat32);
  EXPECT_EQ(b.grad().dtype(), flow::kFloat32);
  // Close to the float32 gradient: bfloat16 keeps 8 bits of mantissa.
  Tensor w32 = w.detach().requires_grad_(), b32 = b.detach().requires_grad_();
  Tensor d = flow::linear(x, w32, b32) - target;
  flow::sum(d * d).backward();
  flow::testing::expect_close(w.grad(), w32.grad(), 5e-2, 5e-2);
  flow::testing::expect_close(b.grad(), b32.grad(), 5e-2, 5e-2);
  handle.remove();
}

// A convolution with bias, stride, padding and groups under autocast: forward and both gradients
// run in bfloat16 (oneDNN's kernels where the CPU multiplies bfloat16) and match float32 on the
// rounded values.
TEST(Autocast, ConvolutionAndItsGradientsMatchFloat32OnRoundedValues) {
  flow::manual_seed(6);
  const auto rounded = [](const Tensor& t) { return t.to(flow::kBFloat16).to(flow::kFloat32); };
  Tensor x = flow::randn({2, 4, 9, 7}).requires_grad_(), w = flow::randn({6, 2, 3, 3}).requires_grad_();
  const Tensor b = flow::randn({6}), g = flow::randn({2, 6, 5, 4});
  Tensor y;
  {
    const flow::autocast amp;
    y = flow::conv2d(x, w, b, {2, 2}, {1, 1}, {1, 1}, 2);
    EXPECT_EQ(y.dtype(), flow::kBFloat16);
  }
  flow::sum(y * g).backward();  // y's gradient is g rounded to bfloat16
  Tensor xr = rounded(x.detach()).requires_grad_(), wr = rounded(w.detach()).requires_grad_();
  const Tensor expected = flow::conv2d(xr, wr, rounded(b), {2, 2}, {1, 1}, {1, 1}, 2);
  flow::sum(expected * rounded(g)).backward();
  flow::testing::expect_bfloat16_product(y, expected);
  // The leaves' float32 gradients are the bfloat16 ones widened.
  flow::testing::expect_bfloat16_product(x.grad().to(flow::kBFloat16), xr.grad());
  flow::testing::expect_bfloat16_product(w.grad().to(flow::kBFloat16), wr.grad());
}

// Ungrouped convolutions' weight gradients in bfloat16 (oneDNN's kernels where the CPU multiplies
// bfloat16: AMX on the LeNet's 32->64 channels, jit_bf16 on one input channel): float32's on the
// rounded values, with stride, padding and dilation.
TEST(Autocast, UngroupedConvolutionWeightGradientsMatchFloat32OnRoundedValues) {
  flow::manual_seed(7);
  const auto rounded = [](const Tensor& t) { return t.to(flow::kBFloat16).to(flow::kFloat32); };
  struct Case {
    std::vector<int64_t> x, w, stride, padding, dilation;
  };
  for (const Case& c : {Case{{4, 32, 13, 13}, {64, 32, 3, 3}, {1, 1}, {0, 0}, {1, 1}}, Case{{3, 8, 11, 9}, {5, 8, 3, 2}, {2, 1}, {1, 1}, {1, 2}},
                        Case{{2, 1, 12, 12}, {16, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}}}) {
    SCOPED_TRACE(::testing::Message() << flow::Shape(c.x) << " * " << flow::Shape(c.w));
    Tensor x = flow::randn(flow::Shape(c.x)), w = flow::randn(flow::Shape(c.w)).requires_grad_();
    Tensor y;
    {
      const flow::autocast amp;
      y = flow::conv2d(x, w, Tensor(), c.stride, c.padding, c.dilation);
    }
    const Tensor g = flow::randn(y.shape());
    flow::sum(y * g).backward();
    Tensor wr = rounded(w.detach()).requires_grad_();
    flow::sum(flow::conv2d(rounded(x), wr, Tensor(), c.stride, c.padding, c.dilation) * rounded(g)).backward();
    flow::testing::expect_bfloat16_product(w.grad().to(flow::kBFloat16), wr.grad());
  }
}
