#include <gtest/gtest.h>

#include <sstream>

#include "core/flow.h"

namespace {
std::string str(const flow::Tensor& t) {
  std::ostringstream out;
  out << t;
  return out.str();
}
}  // namespace

TEST(Print, MatchesPyTorchStyle) {
  EXPECT_EQ(str(flow::tensor<float>({3.2023f, 2.9805f, -2.6793f}, flow::Shape{1, 3})),
            "tensor([[ 3.2023,  2.9805, -2.6793]], dtype=flow.float32)");
  EXPECT_EQ(str(flow::arange(6).reshape({2, 3})), "tensor([[0, 1, 2],\n        [3, 4, 5]], dtype=flow.int64)");
  EXPECT_EQ(str(flow::ones({2}, flow::kFloat64)), "tensor([1., 1.], dtype=flow.float64)");
  EXPECT_EQ(str(flow::full({}, 0.5)), "tensor(0.5000, dtype=flow.float32)");
  EXPECT_EQ(str(flow::tensor<bool>({true, false})), "tensor([ True, False], dtype=flow.bool)");
  EXPECT_EQ(str(flow::zeros({0, 3})), "tensor([], size=(0, 3), dtype=flow.float32)");
  EXPECT_EQ(str(flow::zeros({0})), "tensor([], dtype=flow.float32)");
}

TEST(Print, ScientificForWideRanges) {
  EXPECT_EQ(str(flow::tensor<float>({1e-5f, 1.f, 12345.f})), "tensor([1.0000e-05, 1.0000e+00, 1.2345e+04], dtype=flow.float32)");
}

TEST(Print, ThreeDimensionsSeparateBlocks) {
  EXPECT_EQ(str(flow::arange(8).reshape({2, 2, 2})),
            "tensor([[[0, 1],\n         [2, 3]],\n\n        [[4, 5],\n         [6, 7]]], dtype=flow.int64)");
}

TEST(Print, SummarisesLargeTensors) {
  const std::string s = str(flow::arange(2000));
  EXPECT_EQ(s, "tensor([   0,    1,    2,  ..., 1997, 1998, 1999], dtype=flow.int64)");
  const std::string m = str(flow::zeros({100, 100}));
  EXPECT_NE(m.find("[0., 0., 0.,  ..., 0., 0., 0.],\n        [0., 0., 0.,  ..., 0., 0., 0.],\n        ...,"),
            std::string::npos)
      << m;
}

TEST(Print, WrapsLongRows) {
  const std::string s = str(flow::arange(30, flow::kFloat32));
  EXPECT_NE(s.find(",\n        "), std::string::npos) << s;
}
