// CUDA convolution, pooling and batch norm (cuDNN, plus pool_norm.cu) against the CPU kernels,
// float32 and float64. The gradient ops run by name (conv2d_grad_input, max_pool2d_grad,
// batch_norm_train_grad, ...) on the same inputs on both devices: this test area links only
// flow_core, without the autograd engine. Every test but the registration one skips when no
// CUDA device is present.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "common/reference.h"
#include "common/test_util.h"
#include "core/interpreter.h"
#include "core/op.h"

using flow::Attrs;
using flow::DType;
using flow::Shape;
using flow::Tensor;
using flow::TensorList;
using flow::testing::expect_close;

namespace {

using Pair = std::vector<int64_t>;
const flow::Device kCuda("cuda:0");
const DType kDtypes[] = {flow::kFloat32, flow::kFloat64};

// Tolerances per dtype: float32 sums of up to a few hundred products, float64 near exact.
double rtol(DType dtype) { return dtype == flow::kFloat32 ? 1e-4 : 1e-10; }
double atol(DType dtype) { return dtype == flow::kFloat32 ? 1e-4 : 1e-10; }

TensorList run(const std::string& op, const TensorList& inputs, const Attrs& attrs) {
  return flow::apply(flow::find_op(op), inputs, attrs);
}

TensorList to_cuda(const TensorList& tensors) {
  TensorList moved;
  for (const Tensor& t : tensors) moved.push_back(t.to(kCuda));
  return moved;
}

// Runs op on the CPU and on CUDA with the same inputs and compares every output.
void expect_op_matches_cpu(const std::string& op, const TensorList& inputs, const Attrs& attrs, DType dtype) {
  SCOPED_TRACE(op);
  const TensorList expected = run(op, inputs, attrs), actual = run(op, to_cuda(inputs), attrs);
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    SCOPED_TRACE("output " + std::to_string(i));
    EXPECT_EQ(actual[i].device(), kCuda);
    expect_close(actual[i].cpu(), expected[i], rtol(dtype), atol(dtype));
  }
}

struct ConvCase {
  Shape x, w;
  Pair stride, padding, dilation;
  int64_t groups;
  bool bias;
};

const ConvCase kConvCases[] = {
    {{3, 4, 9, 7}, {6, 4, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},     // batch 3, odd sizes, same padding
    {{1, 4, 11, 10}, {8, 2, 3, 2}, {2, 2}, {1, 0}, {1, 1}, 2, true},   // batch 1, stride 2, groups 2, non-square kernel
    {{3, 3, 13, 9}, {5, 3, 3, 3}, {1, 2}, {2, 2}, {2, 2}, 1, false},   // dilation 2, mixed strides
    {{2, 6, 8, 8}, {6, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 6, true},     // depthwise
    {{3, 5, 7, 5}, {4, 5, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, false},    // 1x1
    {{1, 2, 5, 5}, {3, 2, 5, 4}, {3, 1}, {0, 1}, {1, 1}, 1, true},     // kernel as tall as the input
    {{2, 4, 10, 12}, {6, 2, 2, 3}, {2, 3}, {1, 1}, {2, 1}, 2, false},  // everything at once
};

Attrs conv_attrs(const ConvCase& c) {
  return Attrs().set("stride", c.stride).set("padding", c.padding).set("dilation", c.dilation).set("groups", c.groups);
}

TEST(Cudnn, ConvolutionMatchesCpu) {
  REQUIRE_CUDA();
  flow::manual_seed(21);
  for (DType dtype : kDtypes) {
    for (const ConvCase& c : kConvCases) {
      SCOPED_TRACE(std::string(flow::dtype_name(dtype)) + " x " + c.x.str() + " w " + c.w.str());
      Tensor x = flow::randn(c.x, dtype), w = flow::randn(c.w, dtype), b = flow::randn({c.w[0]}, dtype);
      const Tensor expected = flow::conv2d(x, w, c.bias ? b : Tensor(), c.stride, c.padding, c.dilation, c.groups);
      const Tensor actual =
          flow::conv2d(x.to(kCuda), w.to(kCuda), c.bias ? b.to(kCuda) : Tensor(), c.stride, c.padding, c.dilation, c.groups);
      EXPECT_EQ(actual.device(), kCuda);
      expect_close(actual.cpu(), expected, rtol(dtype), atol(dtype));
      // A second call takes the cached algorithm.
      expect_close(flow::conv2d(x.to(kCuda), w.to(kCuda), c.bias ? b.to(kCuda) : Tensor(), c.stride, c.padding, c.dilation, c.groups).cpu(),
                   expected, rtol(dtype), atol(dtype));
    }
  }
}

TEST(Cudnn, ConvolutionGradientsMatchCpu) {
  REQUIRE_CUDA();
  flow::manual_seed(22);
  for (DType dtype : kDtypes) {
    for (const ConvCase& c : kConvCases) {
      SCOPED_TRACE(std::string(flow::dtype_name(dtype)) + " x " + c.x.str() + " w " + c.w.str());
      Tensor x = flow::randn(c.x, dtype), w = flow::randn(c.w, dtype);
      const Tensor grad = flow::randn_like(flow::conv2d(x, w, Tensor(), c.stride, c.padding, c.dilation, c.groups));
      expect_op_matches_cpu("conv2d_grad_input", {grad, w}, conv_attrs(c).set("input_shape", c.x), dtype);
      expect_op_matches_cpu("conv2d_grad_weight", {grad, x}, conv_attrs(c).set("weight_shape", c.w), dtype);
    }
  }
}

TEST(Cudnn, ConvolutionEmptyBatchAndStridedInput) {
  REQUIRE_CUDA();
  flow::manual_seed(23);
  const ConvCase c = kConvCases[0];
  const Tensor w = flow::randn(c.w);
  const Tensor empty_x = flow::randn({0, 4, 9, 7});
  const Tensor y = flow::conv2d(empty_x.to(kCuda), w.to(kCuda), Tensor(), c.stride, c.padding);
  EXPECT_EQ(y.shape(), Shape({0, 6, 9, 7}));
  const Tensor grad_weight = run("conv2d_grad_weight", {y, empty_x.to(kCuda)}, conv_attrs(c).set("weight_shape", c.w))[0];
  EXPECT_EQ(grad_weight.cpu().tolist<float>(), std::vector<float>(static_cast<size_t>(c.w.numel()), 0.0f));
  EXPECT_EQ(run("conv2d_grad_input", {y, w.to(kCuda)}, conv_attrs(c).set("input_shape", empty_x.shape()))[0].shape(), empty_x.shape());
  // A transposed (non-contiguous) input is made contiguous before the kernel.
  const Tensor x = flow::randn({3, 4, 7, 9});
  expect_close(flow::conv2d(x.to(kCuda).transpose(2, 3), w.to(kCuda), Tensor(), c.stride, c.padding).cpu(),
               flow::conv2d(x.transpose(2, 3), w, Tensor(), c.stride, c.padding), 1e-4, 1e-4);
}

struct PoolCase {
  Shape x;
  Pair kernel, stride, padding;
};

const PoolCase kPoolCases[] = {
    {{3, 4, 9, 7}, {3, 3}, {2, 2}, {1, 1}},   // overlapping, padded, odd sizes
    {{1, 2, 8, 8}, {2, 2}, {2, 2}, {0, 0}},   // batch 1, the common 2x2
    {{3, 3, 11, 6}, {3, 2}, {1, 2}, {1, 1}},  // non-square, stride 1 rows
    {{1, 1, 5, 5}, {5, 5}, {1, 1}, {2, 2}},   // windows mostly padding
    {{2, 5, 7, 10}, {2, 4}, {3, 2}, {1, 2}},  // windows skipping rows
};

Attrs pool_attrs(const PoolCase& c) { return Attrs().set("kernel_size", c.kernel).set("stride", c.stride).set("padding", c.padding); }

TEST(Cudnn, MaxPoolingWithIndicesMatchesCpu) {
  REQUIRE_CUDA();
  flow::manual_seed(24);
  for (DType dtype : kDtypes) {
    for (const PoolCase& c : kPoolCases) {
      SCOPED_TRACE(std::string(flow::dtype_name(dtype)) + " x " + c.x.str());
      // Values truncated to integers make ties, where the first maximum of the window must win.
      for (const Tensor& x : {flow::randn(c.x, dtype), (flow::randn(c.x, dtype) * 2.0).to(flow::kInt64).to(dtype)}) {
        const TensorList expected = run("max_pool2d", {x}, pool_attrs(c)), actual = run("max_pool2d", {x.to(kCuda)}, pool_attrs(c));
        EXPECT_EQ(actual[0].cpu().to(flow::kFloat64).tolist<double>(), expected[0].to(flow::kFloat64).tolist<double>());
        EXPECT_EQ(actual[1].cpu().tolist<int64_t>(), expected[1].tolist<int64_t>());
        const Tensor grad = flow::randn_like(expected[0]);
        expect_op_matches_cpu("max_pool2d_grad", {grad, expected[1]}, pool_attrs(c).set("input_shape", c.x), dtype);
        expect_op_matches_cpu("max_pool2d_inference", {x}, pool_attrs(c), dtype);
      }
    }
  }
}

TEST(Cudnn, MaxPoolingPropagatesNanAndKeepsInfinity) {
  REQUIRE_CUDA();
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (DType dtype : kDtypes) {
    SCOPED_TRACE(flow::dtype_name(dtype));
    // 4x4 in 2x2 windows: one with a NaN, one all -inf, one with +inf, one plain.
    const Tensor x = flow::tensor(std::vector<float>{1, nan, -inf, -inf, 2, 0, -inf, -inf, inf, 3, 5, 6, 4, 1, 7, 8}, Shape{1, 1, 4, 4})
                         .to(dtype);
    const PoolCase c{{1, 1, 4, 4}, {2, 2}, {2, 2}, {0, 0}};
    const TensorList expected = run("max_pool2d", {x}, pool_attrs(c)), actual = run("max_pool2d", {x.to(kCuda)}, pool_attrs(c));
    expect_close(actual[0].cpu(), expected[0]);
    EXPECT_EQ(actual[1].cpu().tolist<int64_t>(), expected[1].tolist<int64_t>());
    expect_close(run("max_pool2d_inference", {x.to(kCuda)}, pool_attrs(c))[0].cpu(), expected[0]);
  }
}

TEST(Cudnn, AveragePoolingMatchesCpu) {
  REQUIRE_CUDA();
  flow::manual_seed(25);
  for (DType dtype : kDtypes) {
    for (const PoolCase& c : kPoolCases) {
      SCOPED_TRACE(std::string(flow::dtype_name(dtype)) + " x " + c.x.str());
      const Tensor x = flow::randn(c.x, dtype);
      expect_op_matches_cpu("avg_pool2d", {x}, pool_attrs(c), dtype);
      const Tensor grad = flow::randn_like(run("avg_pool2d", {x}, pool_attrs(c))[0]);
      expect_op_matches_cpu("avg_pool2d_grad", {grad}, pool_attrs(c).set("input_shape", c.x), dtype);
    }
  }
}

TEST(Cudnn, PoolingEmptyBatch) {
  REQUIRE_CUDA();
  const Tensor x = flow::zeros({0, 2, 6, 6}, flow::TensorOptions().device(kCuda));
  const PoolCase c{{0, 2, 6, 6}, {2, 2}, {2, 2}, {0, 0}};
  for (const char* op : {"max_pool2d", "max_pool2d_inference", "avg_pool2d"}) {
    EXPECT_EQ(run(op, {x}, pool_attrs(c))[0].shape(), Shape({0, 2, 3, 3})) << op;
  }
}

// Input shapes of rank 2 to 5 (the channel dim second), batch 1 included.
const Shape kNormShapes[] = {{3, 4, 5, 6}, {7, 3}, {2, 3, 4, 5, 2}, {1, 2, 7, 1}, {4, 5, 9}};

TEST(Cudnn, BatchNormEvalMatchesCpu) {
  REQUIRE_CUDA();
  flow::manual_seed(26);
  for (DType dtype : kDtypes) {
    for (const Shape& shape : kNormShapes) {
      SCOPED_TRACE(std::string(flow::dtype_name(dtype)) + " " + shape.str());
      const int64_t channels = shape[1];
      const Tensor x = flow::randn(shape, dtype), mean = flow::randn({channels}, dtype), var = flow::rand({channels}, dtype) + 0.5;
      const Tensor weight = flow::randn({channels}, dtype), bias = flow::randn({channels}, dtype);
      expect_op_matches_cpu("batch_norm_eval", {x, mean, var}, Attrs().set("eps", 1e-5), dtype);
      expect_op_matches_cpu("batch_norm_eval", {x, mean, var, weight, bias}, Attrs().set("eps", 1e-3), dtype);
    }
  }
}

TEST(Cudnn, BatchNormTrainMatchesCpu) {
  REQUIRE_CUDA();
  flow::manual_seed(27);
  for (DType dtype : kDtypes) {
    for (const Shape& shape : kNormShapes) {
      SCOPED_TRACE(std::string(flow::dtype_name(dtype)) + " " + shape.str());
      const int64_t channels = shape[1];
      // An offset and scale per channel, so the statistics differ from (0, 1).
      const Tensor x = flow::randn(shape, dtype) * 3.0 + 2.0;
      const Tensor weight = flow::randn({channels}, dtype), bias = flow::randn({channels}, dtype);
      // outputs: out, mean, invstd (1 / sqrt(biased variance + eps)).
      expect_op_matches_cpu("batch_norm_train", {x}, Attrs().set("eps", 1e-5), dtype);
      expect_op_matches_cpu("batch_norm_train", {x, weight, bias}, Attrs().set("eps", 1e-3), dtype);
    }
  }
}

TEST(Cudnn, BatchNormTrainGradMatchesCpu) {
  REQUIRE_CUDA();
  flow::manual_seed(28);
  for (DType dtype : kDtypes) {
    for (const Shape& shape : kNormShapes) {
      SCOPED_TRACE(std::string(flow::dtype_name(dtype)) + " " + shape.str());
      const int64_t channels = shape[1];
      const Tensor x = flow::randn(shape, dtype) * 2.0 - 1.0, weight = flow::randn({channels}, dtype);
      const Attrs attrs = Attrs().set("eps", 1e-5);
      const TensorList forward = run("batch_norm_train", {x}, attrs);
      const Tensor grad_out = flow::randn(shape, dtype), zero = flow::zeros({channels}, dtype);
      const Tensor grad_mean = flow::randn({channels}, dtype), grad_invstd = flow::randn({channels}, dtype);
      // Through the output only (the usual case), then through mean and invstd too.
      expect_op_matches_cpu("batch_norm_train_grad", {grad_out, zero, zero, x, forward[1], forward[2], weight}, attrs, dtype);
      expect_op_matches_cpu("batch_norm_train_grad", {grad_out, grad_mean, grad_invstd, x, forward[1], forward[2], weight}, attrs, dtype);
      expect_op_matches_cpu("batch_norm_train_grad", {grad_out, grad_mean, grad_invstd, x, forward[1], forward[2]}, attrs, dtype);
    }
  }
}

TEST(Cudnn, ErrorsNameTheOp) {
  REQUIRE_CUDA();
  const Tensor x = flow::randn({1, 2, 5, 5}).to(kCuda);
  EXPECT_THROW_MSG(flow::conv2d(x, flow::randn({3, 2, 3, 3})), "[conv2d] expected all tensors on the same device, got cuda:0 and cpu");
  EXPECT_THROW_MSG(flow::conv2d(x.to(flow::kInt64), flow::zeros({3, 2, 3, 3}, flow::TensorOptions(flow::kInt64).device(kCuda))),
                   "[conv2d] expected floating operands");
  EXPECT_THROW_MSG(flow::batch_norm_eval(x, flow::zeros({2}, flow::TensorOptions(flow::kFloat64).device(kCuda)),
                                         flow::ones({2}, flow::TensorOptions(flow::kFloat64).device(kCuda))),
                   "[batch_norm] running_mean has dtype float64");
}

// Runs without a device: the kernels are registered for float32 and float64, convolution and max
// pooling also for float16 and bfloat16 (autocast runs them there); asking for another dtype's
// kernel names the op.
TEST(Cudnn, KernelsRegisteredForFloatingDtypes) {
#ifndef FLOW_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#endif
  for (const char* op : {"conv2d", "conv2d_grad_input", "conv2d_grad_weight", "max_pool2d", "max_pool2d_inference", "max_pool2d_grad",
                         "avg_pool2d", "avg_pool2d_grad", "batch_norm_eval", "batch_norm_train", "batch_norm_train_grad"}) {
    SCOPED_TRACE(op);
    const flow::OpDef& def = flow::find_op(op);
    EXPECT_NO_THROW(def.kernel(flow::DeviceType::kCUDA, flow::kFloat32));
    EXPECT_NO_THROW(def.kernel(flow::DeviceType::kCUDA, flow::kFloat64));
    const std::string name(op);
    if (name.starts_with("conv2d") || name.starts_with("max_pool2d")) {
      EXPECT_NO_THROW(def.kernel(flow::DeviceType::kCUDA, flow::kFloat16));
      EXPECT_NO_THROW(def.kernel(flow::DeviceType::kCUDA, flow::kBFloat16));
    } else {
      EXPECT_THROW_MSG(def.kernel(flow::DeviceType::kCUDA, flow::kFloat16), std::string("[") + op + "] no cuda kernel for dtype float16");
    }
  }
}

}  // namespace
