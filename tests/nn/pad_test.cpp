// nn::functional::pad, constant mode: PyTorch's pair order (last dim first), negative entries
// cropping, the gradient checker and PyTorch's argument errors.
#include <gtest/gtest.h>

#include "common/gradcheck.h"
#include "common/reference.h"
#include "common/test_util.h"
#include "nn/functional.h"

using flow::Shape;
using flow::Tensor;
namespace F = flow::nn::functional;

namespace {

TEST(Pad, ConstantPairsStartFromTheLastDim) {
  const Tensor x = flow::arange(1.0, 7.0).reshape({2, 3});
  const Tensor out = F::pad(x, {1, 0, 0, 2}, "constant", -1.0);
  EXPECT_EQ(out.shape(), (Shape{4, 4}));
  EXPECT_EQ(flow::testing::values(out), (std::vector<double>{-1, 1, 2, 3, -1, 4, 5, 6, -1, -1, -1, -1, -1, -1, -1, -1}));
  // Only the last dim: a (2, 3) input padded (2, 1) is (2, 6).
  EXPECT_EQ(F::pad(x, {2, 1}).shape(), (Shape{2, 6}));
  EXPECT_EQ(flow::testing::values(F::pad(x, {2, 1}).select(0, 1)), (std::vector<double>{0, 0, 4, 5, 6, 0}));
}

TEST(Pad, NegativeEntriesCrop) {
  const Tensor x = flow::arange(1.0, 13.0).reshape({3, 4});
  const Tensor out = F::pad(x, {-1, 1, -2, 0});
  EXPECT_EQ(out.shape(), (Shape{1, 4}));
  EXPECT_EQ(flow::testing::values(out), (std::vector<double>{10, 11, 12, 0}));
  EXPECT_EQ(F::pad(x, {-4, 0}).shape(), (Shape{3, 0}));
}

TEST(Pad, PassesTheGradientChecker) {
  flow::manual_seed(40);
  EXPECT_TRUE(flow::testing::gradcheck([](const flow::TensorList& in) { return F::pad(in[0], {2, -1, 1, 3}, "constant", 0.5); },
                                       {flow::randn({2, 3, 4}, flow::kFloat64).requires_grad_(true)}));
}

TEST(Pad, BadArgumentsFailAtTheCall) {
  const Tensor x = flow::zeros({2, 3});
  EXPECT_THROW_MSG(F::pad(x, {1, 2, 3}), "[pad] Padding length must be divisible by 2");
  EXPECT_THROW_MSG(F::pad(x, {1, 1, 1, 1, 1, 1}), "less than or equal to two times the input dimension");
  EXPECT_THROW_MSG(F::pad(x, {-2, -2}), "resulted in a negative output size");
  EXPECT_THROW_MSG(F::pad(x, {1, 1}, "reflect"), "[pad] mode 'reflect' is not implemented; only 'constant' is");
}

}  // namespace
