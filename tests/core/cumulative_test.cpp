#include <gtest/gtest.h>

#include "common/reference.h"
#include "common/test_util.h"
#include "core/op.h"

using flow::Shape;
using flow::Tensor;

namespace {
// Running sums along dim in float64, element by element.
Tensor reference_cumsum(const Tensor& x, int64_t dim) {
  const std::vector<double> v = flow::testing::values(x);
  std::vector<double> out(v.size());
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  const int64_t n = x.size(dim);
  for (size_t k = 0; k < v.size(); ++k) {
    const int64_t i = static_cast<int64_t>(k) / inner % n;
    out[k] = v[k] + (i > 0 ? out[k - inner] : 0.0);
  }
  return flow::tensor<double>(out, x.shape());
}
}  // namespace

TEST(Cumsum, HandComputed) {
  const Tensor x = flow::tensor<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  EXPECT_EQ(flow::cumsum(x, 1).tolist<float>(), (std::vector<float>{1, 3, 6, 4, 9, 15}));
  EXPECT_EQ(flow::cumsum(x, 0).tolist<float>(), (std::vector<float>{1, 2, 3, 5, 7, 9}));
  EXPECT_EQ(flow::cumsum(x, -1).tolist<float>(), flow::cumsum(x, 1).tolist<float>());
  const Tensor scalar = flow::cumsum(flow::scalar_tensor(2.5), 0);
  EXPECT_EQ(scalar.shape(), Shape{});
  EXPECT_EQ(scalar.item<float>(), 2.5f);
  EXPECT_EQ(flow::cumsum(flow::zeros({2, 0, 3}), 1).shape(), (Shape{2, 0, 3}));
}

TEST(Cumsum, MatchesReferenceAlongEveryDimAndOnViews) {
  flow::manual_seed(41);
  for (flow::DType dtype : {flow::kFloat32, flow::kFloat64}) {
    // Inner sizes below, at and above the kernel's 64-column blocks.
    for (const Shape& shape : std::vector<Shape>{{7}, {3, 5, 4}, {2, 9, 130}, {70, 3}}) {
      const Tensor x = flow::randn(shape, dtype);
      for (int64_t dim = 0; dim < x.dim(); ++dim) {
        SCOPED_TRACE(shape.str() + " dim " + std::to_string(dim) + " " + flow::dtype_name(dtype));
        flow::testing::expect_close(flow::cumsum(x, dim), reference_cumsum(x, dim), 1e-6, 1e-6);
      }
    }
  }
  const Tensor view = flow::randn({4, 6}).t();
  flow::testing::expect_close(flow::cumsum(view, 1), reference_cumsum(view, 1), 1e-6, 1e-6);
}

TEST(Cumsum, Float32AccumulatesInFloat64) {
  // 2^24 + 1 is not a float32: summed in float32 the running total would stick at 2^24.
  const Tensor x = flow::ones({(1 << 24) + 8});
  const Tensor y = flow::cumsum(x, 0);
  EXPECT_EQ(y.dtype(), flow::kFloat32);
  EXPECT_EQ(y.select(0, y.size(0) - 1).item<float>(), static_cast<float>((1 << 24) + 8));
  // A million 0.1s: a float32 accumulator drifts by about 1e3 ulps; the result is 1e5 rounded once.
  const Tensor tenths = flow::full({1000000}, 0.1);
  EXPECT_EQ(flow::cumsum(tenths, 0).select(0, 999999).item<float>(), static_cast<float>(1000000 * static_cast<double>(0.1f)));
}

TEST(Cumsum, IntegerAndBoolInputsSumInInt64AndDtypeCasts) {
  const Tensor counts = flow::cumsum(flow::tensor<bool>({true, false, true, true}), 0);
  EXPECT_EQ(counts.dtype(), flow::kInt64);
  EXPECT_EQ(counts.tolist<int64_t>(), (std::vector<int64_t>{1, 1, 2, 3}));
  const Tensor bytes = flow::cumsum(flow::tensor<uint8_t>({200, 100, 50}), 0);
  EXPECT_EQ(bytes.tolist<int64_t>(), (std::vector<int64_t>{200, 300, 350}));  // no uint8 wrap-around
  const Tensor as_double = flow::cumsum(flow::tensor<int32_t>({1, 2}), 0, flow::kFloat64);
  EXPECT_EQ(as_double.dtype(), flow::kFloat64);
  EXPECT_EQ(as_double.tolist<double>(), (std::vector<double>{1, 3}));
  const Tensor bf16 = flow::cumsum(flow::tensor<float>({1, 2, 3}).to(flow::kBFloat16), 0);
  EXPECT_EQ(bf16.dtype(), flow::kBFloat16);
  EXPECT_EQ(bf16.to(flow::kFloat32).tolist<float>(), (std::vector<float>{1, 3, 6}));
}

TEST(Cumsum, SbpSplitsTheOtherDims) {
  const auto signatures = flow::find_op("cumsum").sbp({{Shape{2, 3, 4}, flow::kFloat32, flow::kCPU}},
                                                      flow::Attrs().set("dim", 1).set("reverse", false));
  std::vector<std::string> described;
  for (const auto& s : signatures) described.push_back(s.inputs[0].str() + "->" + s.outputs[0].str());
  EXPECT_EQ(described, (std::vector<std::string>{"S(0)->S(0)", "S(2)->S(2)", "B->B", "P->P"}));
}

TEST(Cumsum, Errors) {
  EXPECT_THROW_MSG(flow::cumsum(flow::zeros({2, 3}), 2), "[cumsum] dim 2 out of range for a tensor of 2 dimensions");
  EXPECT_THROW_MSG(flow::cumsum(flow::zeros({2, 3}), -3), "[cumsum] dim -3 out of range");
  EXPECT_THROW_MSG(flow::cumsum(flow::scalar_tensor(1.0), 1), "[cumsum] dim 1 out of range");
  // The functional call sums bool in int64; the op itself has no bool kernel.
  EXPECT_THROW_MSG(flow::apply_one(flow::find_op("cumsum"), {flow::ones({2}, flow::kBool)}, flow::Attrs().set("dim", 0).set("reverse", false)),
                   "[cumsum] no cpu kernel for dtype bool");
}
