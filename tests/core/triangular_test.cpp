#include <gtest/gtest.h>

#include <limits>

#include "common/reference.h"
#include "common/test_util.h"
#include "core/op.h"

using flow::Shape;
using flow::Tensor;

namespace {
// Element (.., i, j) of x where the triangle keeps it, else 0, computed in float64.
Tensor reference_triangle(const Tensor& x, int64_t diagonal, bool lower) {
  std::vector<double> v = flow::testing::values(x);
  const int64_t rows = x.size(-2), cols = x.size(-1);
  for (size_t k = 0; k < v.size(); ++k) {
    const int64_t i = static_cast<int64_t>(k) / cols % rows, j = static_cast<int64_t>(k) % cols;
    const bool keep = lower ? j - i <= diagonal : j - i >= diagonal;
    if (!keep) v[k] = 0;
  }
  return flow::tensor<double>(v, x.shape());
}
}  // namespace

TEST(Triangular, HandComputedSquare) {
  const Tensor x = flow::arange(1, 10).reshape({3, 3});
  EXPECT_EQ(flow::tril(x).tolist<int64_t>(), (std::vector<int64_t>{1, 0, 0, 4, 5, 0, 7, 8, 9}));
  EXPECT_EQ(flow::triu(x).tolist<int64_t>(), (std::vector<int64_t>{1, 2, 3, 0, 5, 6, 0, 0, 9}));
  EXPECT_EQ(flow::tril(x, 1).tolist<int64_t>(), (std::vector<int64_t>{1, 2, 0, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(flow::tril(x, -1).tolist<int64_t>(), (std::vector<int64_t>{0, 0, 0, 4, 0, 0, 7, 8, 0}));
  EXPECT_EQ(flow::triu(x, 1).tolist<int64_t>(), (std::vector<int64_t>{0, 2, 3, 0, 0, 6, 0, 0, 0}));
  EXPECT_EQ(flow::triu(x, -1).tolist<int64_t>(), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 0, 8, 9}));
  EXPECT_EQ(x.tril().tolist<int64_t>(), flow::tril(x).tolist<int64_t>());
  EXPECT_EQ(x.triu(2).tolist<int64_t>(), (std::vector<int64_t>{0, 0, 3, 0, 0, 0, 0, 0, 0}));
}

TEST(Triangular, MatchesReferenceOnBatchesRectangularAndViews) {
  flow::manual_seed(31);
  for (flow::DType dtype : {flow::kFloat32, flow::kFloat64, flow::kBFloat16}) {
    for (const Shape& shape : std::vector<Shape>{{4, 6}, {6, 4}, {2, 3, 5, 4}, {1, 1}, {0, 3}, {3, 0}, {2, 0, 2}}) {
      const Tensor x = flow::randn(shape).to(dtype);
      for (int64_t diagonal : {-7, -2, -1, 0, 1, 3, 9}) {
        SCOPED_TRACE(shape.str() + " " + flow::dtype_name(dtype) + " diagonal " + std::to_string(diagonal));
        EXPECT_EQ(flow::tril(x, diagonal).dtype(), dtype);
        flow::testing::expect_close(flow::tril(x, diagonal), reference_triangle(x, diagonal, true), 0, 0);
        flow::testing::expect_close(flow::triu(x, diagonal), reference_triangle(x, diagonal, false), 0, 0);
      }
    }
  }
  const Tensor base = flow::randn({5, 3, 4});
  const Tensor view = base.transpose(0, 2);  // (4, 3, 5), non-contiguous
  flow::testing::expect_close(view.triu(-1), reference_triangle(view, -1, false), 0, 0);
}

TEST(Triangular, KeepsIntegerAndBoolValuesAndExtremeDiagonals) {
  const Tensor ones = flow::ones({2, 3}, flow::kBool);
  EXPECT_EQ(flow::tril(ones).tolist<bool>(), (std::vector<bool>{true, false, false, true, true, false}));
  const Tensor x = flow::tensor<int32_t>({1, 2, 3, 4}, Shape{2, 2});
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(flow::tril(x, kMax).tolist<int32_t>(), (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(flow::triu(x, kMax).tolist<int32_t>(), (std::vector<int32_t>{0, 0, 0, 0}));
  EXPECT_EQ(flow::tril(x, kMin).tolist<int32_t>(), (std::vector<int32_t>{0, 0, 0, 0}));
  EXPECT_EQ(flow::triu(x, kMin).tolist<int32_t>(), (std::vector<int32_t>{1, 2, 3, 4}));
}

TEST(Triangular, SbpSplitsBatchDims) {
  const auto signatures = flow::find_op("tril").sbp({{Shape{2, 3, 4, 4}, flow::kFloat32, flow::kCPU}}, flow::Attrs().set("diagonal", 0));
  std::vector<std::string> described;
  for (const auto& s : signatures) described.push_back(s.inputs[0].str() + "->" + s.outputs[0].str());
  EXPECT_EQ(described, (std::vector<std::string>{"S(0)->S(0)", "S(1)->S(1)", "B->B", "P->P"}));
}

TEST(Triangular, Errors) {
  EXPECT_THROW_MSG(flow::tril(flow::zeros({3})), "[tril] input tensor must have at least 2 dimensions, got (3,)");
  EXPECT_THROW_MSG(flow::triu(flow::zeros({})), "[triu] input tensor must have at least 2 dimensions");
}
