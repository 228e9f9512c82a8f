#include <gtest/gtest.h>

#include <limits>

#include "autograd/engine.h"
#include "common/reference.h"
#include "common/test_util.h"

using flow::Shape;
using flow::Tensor;
using flow::TensorList;

namespace {

struct PoolCase {
  Shape input;
  std::vector<int64_t> kernel, stride, padding;
};

std::vector<PoolCase> pool_cases() {
  return {{{2, 3, 7, 7}, {3, 3}, {2, 2}, {1, 1}},   {{1, 2, 9, 6}, {2, 3}, {1, 2}, {1, 1}},  {{3, 4, 5, 8}, {2, 2}, {2, 2}, {0, 0}},
          {{1, 1, 11, 13}, {5, 3}, {3, 2}, {2, 1}}, {{2, 16, 6, 6}, {3, 3}, {1, 1}, {1, 1}}, {{1, 1, 1, 1}, {1, 1}, {1, 1}, {0, 0}},
          {{2, 1, 4, 5}, {4, 5}, {1, 1}, {2, 2}},
          // 8 channels and more pool as blocks of channels (max_pool2d_inference), whole windows
          // of 2x2 and 3x3 through unrolled loops, edge windows apart.
          {{2, 8, 7, 9}, {2, 2}, {2, 2}, {1, 1}},   {{1, 24, 9, 9}, {3, 3}, {2, 2}, {0, 0}}, {{1, 16, 5, 6}, {2, 2}, {1, 1}, {1, 0}}};
}

// max_pool2d's outputs (values, argmax indices) straight from the op.
TensorList max_pool_with_indices(const Tensor& x, const PoolCase& c) {
  flow::Attrs attrs;
  attrs.set("kernel_size", c.kernel).set("stride", c.stride).set("padding", c.padding);
  return flow::apply(flow::find_op("max_pool2d"), {x}, attrs);
}

// Output and input gradient (for output gradient `grad`) of one pooling call in `dtype`.
std::pair<Tensor, Tensor> pool_and_grad(bool max, const Tensor& x64, const Tensor& grad64, const PoolCase& c, flow::DType dtype) {
  Tensor x = x64.to(dtype).detach().requires_grad_();
  Tensor y = max ? flow::max_pool2d(x, c.kernel, c.stride, c.padding) : flow::avg_pool2d(x, c.kernel, c.stride, c.padding);
  Tensor grad = flow::autograd::grad({flow::sum(y * grad64.to(dtype))}, {x})[0];
  return {y.detach(), grad};
}

}  // namespace

TEST(Pooling, Float32OneDnnMatchesFloat64Loops) {
  // float32 pools in oneDNN, float64 in the window loops: same inputs, same results.
  flow::manual_seed(30);
  for (const PoolCase& c : pool_cases()) {
    SCOPED_TRACE(::testing::Message() << "input " << c.input << " kernel " << Shape(c.kernel) << " stride " << Shape(c.stride)
                                      << " padding " << Shape(c.padding));
    // Values exact in float32, and integer-valued inputs so that ties (first maximum wins) occur.
    for (const Tensor& x64 : {flow::randn(c.input).to(flow::kFloat64), (flow::randn(c.input) * 2).to(flow::kInt64).to(flow::kFloat64)}) {
      const TensorList single = max_pool_with_indices(x64.to(flow::kFloat32), c), reference = max_pool_with_indices(x64, c);
      EXPECT_EQ(flow::testing::values(single[0]), flow::testing::values(reference[0]));
      EXPECT_EQ(single[1].tolist<int64_t>(), reference[1].tolist<int64_t>());
      const Tensor grad = flow::randn(reference[0].shape(), flow::kFloat64);
      for (bool max : {true, false}) {
        auto [y32, g32] = pool_and_grad(max, x64, grad, c, flow::kFloat32);
        auto [y64, g64] = pool_and_grad(max, x64, grad, c, flow::kFloat64);
        flow::testing::expect_close(y32, y64, 1e-6, 1e-6);
        flow::testing::expect_close(g32, g64, 1e-6, 1e-6);
      }
    }
  }
}

TEST(Pooling, MaxPoolKeepsNanAndInfinity) {
  // oneDNN skips NaN and starts windows from the lowest finite value; flow propagates NaN and
  // keeps -inf, in float32 as in float64.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = flow::tensor<float>({-inf, -inf, 1, 2, -inf, -inf, 3, 4, 5, nan, 6, 7, 8, 9, 10, 11}, Shape{1, 1, 4, 4});
  const PoolCase c{{1, 1, 4, 4}, {2, 2}, {2, 2}, {0, 0}};
  const TensorList single = max_pool_with_indices(x, c), reference = max_pool_with_indices(x.to(flow::kFloat64), c);
  flow::testing::expect_close(single[0], reference[0]);
  EXPECT_EQ(single[1].tolist<int64_t>(), reference[1].tolist<int64_t>());
  EXPECT_EQ(single[1].tolist<int64_t>(), (std::vector<int64_t>{0, 7, 9, 15}));
  const auto out = single[0].tolist<float>();
  EXPECT_EQ(out[0], -inf);
  EXPECT_TRUE(std::isnan(out[2]));
  // A clean plane beside it pools as usual.
  Tensor batch = flow::cat({x, flow::arange(16, flow::kFloat32).reshape({1, 1, 4, 4})}, 1);
  EXPECT_EQ(max_pool_with_indices(batch, c)[0].tolist<float>()[5], 7.0f);
}

TEST(Pooling, WideRowsOfTwoByTwoWindowsKeepTiesNanAndIndices) {
  // Rows of whole 2x2 windows of stride 2 pool 8 windows at a time in float32 and bfloat16 (AVX2),
  // 16 with AVX-512, the row's last ones masked: the same maxima and first argmax indices as
  // float64's one-window scan, with ties (small integers), NaN (first NaN of a window wins), -inf
  // and windows in the padding. Rows of 5 to 35 windows: fewer than 8, between 8 and 16, over 32.
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  flow::manual_seed(32);
  for (const PoolCase& c : {PoolCase{{2, 3, 6, 37}, {2, 2}, {2, 2}, {0, 0}}, PoolCase{{1, 2, 5, 40}, {2, 2}, {2, 2}, {1, 1}},
                            PoolCase{{1, 1, 4, 34}, {2, 2}, {2, 2}, {1, 0}}, PoolCase{{3, 2, 11, 11}, {2, 2}, {2, 2}, {0, 0}},
                            PoolCase{{1, 2, 6, 26}, {2, 2}, {2, 2}, {0, 0}}, PoolCase{{1, 1, 4, 70}, {2, 2}, {2, 2}, {0, 1}}}) {
    SCOPED_TRACE(::testing::Message() << "input " << c.input << " padding " << Shape(c.padding));
    Tensor x64 = (flow::randn(c.input) * 2).to(flow::kInt64).to(flow::kFloat64).contiguous();
    auto* data = static_cast<double*>(x64.data_ptr());
    for (int64_t i = 5; i < x64.numel(); i += 7) data[i] = nan;
    for (int64_t i = 3; i < x64.numel(); i += 11) data[i] = -inf;
    const TensorList reference = max_pool_with_indices(x64, c);
    for (flow::DType dtype : {flow::kFloat32, flow::kBFloat16}) {
      const TensorList pooled = max_pool_with_indices(x64.to(dtype), c);
      EXPECT_EQ(pooled[1].tolist<int64_t>(), reference[1].tolist<int64_t>()) << flow::dtype_name(dtype);
      const std::vector<double> got = flow::testing::values(pooled[0]), want = flow::testing::values(reference[0]);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_TRUE(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i]))) << "output " << i << ": " << got[i] << " vs " << want[i];
      }
    }
  }
}

TEST(Pooling, MaxPoolGradientGoesToEachWindowsArgmax) {
  // max_pool2d_grad against a plain scatter of the output gradient onto the argmax indices, for
  // windows that tile the plane (each window written whole, with AVX-512 16 windows at a time in
  // rows of 8 and more; odd sizes leave rows and columns no window covers), overlapping and padded
  // ones, and indices that are not in their windows (from the first output or only the last).
  flow::manual_seed(33);
  const flow::OpDef& grad_op = flow::find_op("max_pool2d_grad");
  auto scatter = [](const Tensor& dy, const Tensor& indices, const flow::Shape& input) {
    const int64_t planes = input[0] * input[1], plane_in = input[2] * input[3], plane_out = dy.numel() / planes;
    std::vector<double> dx(static_cast<size_t>(input.numel()), 0.0);
    const std::vector<double> g = flow::testing::values(dy);
    const std::vector<int64_t> idx = indices.contiguous().tolist<int64_t>();
    for (int64_t p = 0; p < planes; ++p) {
      for (int64_t o = 0; o < plane_out; ++o) dx[p * plane_in + idx[p * plane_out + o]] += g[p * plane_out + o];
    }
    return dx;
  };
  for (const PoolCase& c : {PoolCase{{2, 3, 5, 8}, {2, 2}, {2, 2}, {0, 0}}, PoolCase{{1, 2, 7, 10}, {3, 3}, {3, 3}, {0, 0}},
                            PoolCase{{2, 2, 6, 37}, {2, 2}, {2, 2}, {0, 0}}, PoolCase{{1, 2, 5, 7}, {2, 3}, {2, 3}, {0, 0}},
                            PoolCase{{1, 2, 7, 7}, {3, 3}, {2, 2}, {1, 1}}, PoolCase{{1, 1, 6, 6}, {2, 2}, {2, 2}, {1, 1}},
                            PoolCase{{2, 3, 7, 20}, {2, 2}, {2, 2}, {0, 0}}, PoolCase{{1, 2, 5, 41}, {2, 2}, {2, 2}, {0, 0}}}) {
    SCOPED_TRACE(::testing::Message() << "input " << c.input << " kernel " << Shape(c.kernel) << " stride " << Shape(c.stride));
    const Tensor x = flow::randn(c.input);
    const TensorList pooled = max_pool_with_indices(x, c);
    const flow::Attrs attrs =
        flow::Attrs().set("kernel_size", c.kernel).set("stride", c.stride).set("padding", c.padding).set("input_shape", c.input.vec());
    // Integer-valued gradients: exact in bfloat16 and in any order of summation.
    const Tensor dy = (flow::randn(pooled[0].shape()) * 4).to(flow::kInt64).to(flow::kFloat32);
    // Every output's index moved to its plane's first element: no longer in most windows. Or only
    // each plane's last output's index.
    const Tensor first = flow::zeros(pooled[1].shape(), flow::kInt64);
    Tensor last_moved = pooled[1].clone();
    const int64_t plane_out = pooled[1].size(2) * pooled[1].size(3);
    for (int64_t i = plane_out - 1; i < last_moved.numel(); i += plane_out) static_cast<int64_t*>(last_moved.data_ptr())[i] = 0;
    for (const Tensor& indices : {pooled[1], first, last_moved}) {
      for (flow::DType dtype : {flow::kFloat32, flow::kFloat64, flow::kBFloat16}) {
        const Tensor dx = flow::apply(grad_op, {dy.to(dtype), indices}, attrs).at(0);
        EXPECT_EQ(flow::testing::values(dx), scatter(dy, indices, c.input)) << flow::dtype_name(dtype);
      }
    }
  }
  const PoolCase tiled{{1, 1, 4, 4}, {2, 2}, {2, 2}, {0, 0}};
  const flow::Attrs attrs = flow::Attrs().set("kernel_size", tiled.kernel).set("stride", tiled.stride).set("padding", tiled.padding).set("input_shape", tiled.input.vec());
  EXPECT_THROW_MSG(flow::apply(grad_op, {flow::ones({1, 1, 2, 2}), flow::full({1, 1, 2, 2}, flow::Scalar(int64_t{16}), flow::kInt64)}, attrs),
                   "[max_pool2d] argmax index 16 lies outside the input plane of 16 values");
}

TEST(Pooling, MaxPoolWithoutGradientSkipsIndicesWithTheSameValues) {
  // No gradient needed (no-grad mode, or an input that needs none): max_pool2d runs the values-only
  // op, which must give exactly what the op with indices gives, NaN and -inf planes included.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  flow::manual_seed(31);
  for (const PoolCase& c : pool_cases()) {
    SCOPED_TRACE(::testing::Message() << "input " << c.input << " kernel " << Shape(c.kernel));
    Tensor x = flow::randn(c.input);
    if (x.numel() > 4) {
      x = x.clone();
      x.view({-1}).slice(0, 0, 2).fill_(-inf);
      x.view({-1}).slice(0, x.numel() - 1, x.numel()).fill_(nan);
      x.view({-1}).slice(0, x.numel() / 2, x.numel() / 2 + 1).fill_(nan);
    }
    for (flow::DType dtype : {flow::kFloat32, flow::kFloat64, flow::kBFloat16}) {
      const Tensor input = x.to(dtype);
      const std::vector<double> with_indices = flow::testing::values(max_pool_with_indices(input, c)[0]);
      const std::vector<double> plain = flow::testing::values(flow::max_pool2d(input, c.kernel, c.stride, c.padding));
      ASSERT_EQ(plain.size(), with_indices.size());
      for (size_t i = 0; i < plain.size(); ++i) {
        EXPECT_TRUE(plain[i] == with_indices[i] || (std::isnan(plain[i]) && std::isnan(with_indices[i])))
            << "output " << i << ": " << plain[i] << " vs " << with_indices[i];
      }
    }
  }
  // A whole -inf window, alone in its plane (oneDNN alone would give the lowest finite value).
  Tensor all_inf = flow::full({1, 1, 2, 2}, -inf);
  EXPECT_EQ(flow::max_pool2d(all_inf, {2, 2}).item<float>(), -inf);
  // With a gradient to take, the indices are there and the backward works.
  Tensor y = flow::max_pool2d(flow::arange(16, flow::kFloat32).reshape({1, 1, 4, 4}).requires_grad_(), {2, 2});
  EXPECT_EQ(y.tolist<float>(), (std::vector<float>{5, 7, 13, 15}));
}
