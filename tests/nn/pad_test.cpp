// nn::functional::pad in its four modes and the padding modules: PyTorch's pair order (last dim
// first), negative entries, values from torch 1.13, the gradient checker (first and second
// order) and PyTorch's argument errors.
#include <gtest/gtest.h>

#include <sstream>

#include "common/gradcheck.h"
#include "common/reference.h"
#include "common/test_util.h"
#include "nn/functional.h"
#include "nn/padding.h"

using flow::Shape;
using flow::Tensor;
namespace F = flow::nn::functional;

namespace {

::testing::AssertionResult same(const Tensor& a, const Tensor& b) {
  if (!(a.shape() == b.shape())) return ::testing::AssertionFailure() << a.shape() << " vs " << b.shape();
  if (flow::testing::values(a) != flow::testing::values(b)) return ::testing::AssertionFailure() << "values differ";
  return ::testing::AssertionSuccess();
}

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
  EXPECT_THROW_MSG(F::pad(x, {1, 1}, "symmetric"), "[pad] Unrecognised padding mode symmetric");
}

// The expected values below are torch 1.13's F.pad of the same inputs.
TEST(Pad, ReflectMirrorsAboutTheEdgeElement) {
  const Tensor x = flow::arange(0.0, 6.0).reshape({1, 2, 3});
  EXPECT_EQ(flow::testing::values(F::pad(x, {2, 1}, "reflect")), (std::vector<double>{2, 1, 0, 1, 2, 1, 5, 4, 3, 4, 5, 4}));
  // A negative entry crops before the other side mirrors: (-1, 2) of (0, 1, 2) is (1, 2, 1, 0).
  EXPECT_EQ(flow::testing::values(F::pad(x, {-1, 2}, "reflect")), (std::vector<double>{1, 2, 1, 0, 4, 5, 4, 3}));
  // Unbatched (C, W), and two pairs over (C, H, W).
  EXPECT_EQ(flow::testing::values(F::pad(x.reshape({2, 3}), {1, 1}, "reflect")), (std::vector<double>{1, 0, 1, 2, 1, 4, 3, 4, 5, 4}));
  const Tensor planes = flow::arange(0.0, 6.0).reshape({1, 1, 2, 3});
  const Tensor out = F::pad(planes, {2, 0, 1, 1}, "reflect");
  EXPECT_EQ(out.shape(), (Shape{1, 1, 4, 5}));
  EXPECT_EQ(flow::testing::values(out),
            (std::vector<double>{5, 4, 3, 4, 5, 2, 1, 0, 1, 2, 5, 4, 3, 4, 5, 2, 1, 0, 1, 2}));
  EXPECT_EQ(F::pad(flow::zeros({0, 2, 3}), {1, 1}, "reflect").shape(), (Shape{0, 2, 5}));
}

TEST(Pad, ReplicateRepeatsTheEdgeElement) {
  const Tensor x = flow::arange(0.0, 6.0).reshape({1, 2, 3});
  EXPECT_EQ(flow::testing::values(F::pad(x, {2, -1}, "replicate")), (std::vector<double>{0, 0, 0, 1, 3, 3, 3, 4}));
  // Any width: (5, 5) of a size-3 dim.
  EXPECT_EQ(flow::testing::values(F::pad(x, {5, 5}, "replicate").select(1, 0)),
            (std::vector<double>{0, 0, 0, 0, 0, 0, 1, 2, 2, 2, 2, 2, 2}));
  EXPECT_EQ(flow::testing::values(F::pad(x, {1, 1, 1, 0}, "replicate")),
            (std::vector<double>{0, 0, 1, 2, 2, 0, 0, 1, 2, 2, 3, 3, 4, 5, 5}));
}

TEST(Pad, CircularWrapsAround) {
  const Tensor x = flow::arange(0.0, 6.0).reshape({1, 2, 3});
  EXPECT_EQ(flow::testing::values(F::pad(x, {2, 1}, "circular")), (std::vector<double>{1, 2, 0, 1, 2, 0, 4, 5, 3, 4, 5, 3}));
  EXPECT_EQ(flow::testing::values(F::pad(x, {3, 3}, "circular").select(1, 1)), (std::vector<double>{3, 4, 5, 3, 4, 5, 3, 4, 5}));
  // Negative entries crop first; the other side then wraps what is left.
  EXPECT_EQ(flow::testing::values(F::pad(x, {-1, 2}, "circular")), (std::vector<double>{1, 2, 1, 2, 4, 5, 4, 5}));
  EXPECT_EQ(F::pad(x, {-2, -1}, "circular").shape(), (Shape{1, 2, 0}));
  EXPECT_EQ(flow::testing::values(F::pad(flow::arange(0.0, 6.0).reshape({1, 1, 2, 3}), {1, 0, 1, 0}, "circular")),
            (std::vector<double>{5, 3, 4, 5, 2, 0, 1, 2, 5, 3, 4, 5}));
  // Integer tensors pad as well.
  EXPECT_EQ(F::pad(flow::arange(6, flow::kInt64).reshape({1, 2, 3}), {1, 1}, "circular").tolist<int64_t>(),
            (std::vector<int64_t>{2, 0, 1, 2, 0, 5, 3, 4, 5, 3}));
}

TEST(Pad, GradientsSumTheRepeatedReads) {
  // (a0, a1, a2) reflected by (2, 1) is (a2, a1, a0, a1, a2, a1): a0 is read once, a1 three times, a2 twice.
  Tensor x = flow::zeros({1, 1, 3}, flow::kFloat64).requires_grad_(true);
  flow::sum(F::pad(x, {2, 1}, "reflect")).backward();
  EXPECT_EQ(flow::testing::values(x.grad()), (std::vector<double>{1, 3, 2}));
  Tensor y = flow::zeros({1, 1, 3}, flow::kFloat64).requires_grad_(true);
  flow::sum(F::pad(y, {2, -1}, "replicate")).backward();
  EXPECT_EQ(flow::testing::values(y.grad()), (std::vector<double>{3, 1, 0}));
  Tensor z = flow::zeros({1, 1, 3}, flow::kFloat64).requires_grad_(true);
  flow::sum(F::pad(z, {2, 3}, "circular")).backward();
  EXPECT_EQ(flow::testing::values(z.grad()), (std::vector<double>{2, 3, 3}));
}

TEST(Pad, ModesPassTheGradientCheckerToSecondOrder) {
  flow::manual_seed(41);
  struct Case {
    const char* mode;
    std::vector<int64_t> pad;
    Shape shape;
  };
  const std::vector<Case> cases{{"reflect", {2, -1, 1, 2}, {2, 3, 4}},
                                {"replicate", {3, 1, -1, 2}, {1, 2, 3, 4}},
                                {"circular", {2, -1, 1, 3}, {1, 2, 3, 4}},
                                {"reflect", {1, 2}, {2, 4}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.mode);
    EXPECT_TRUE(flow::testing::gradcheck([&](const flow::TensorList& in) { return F::pad(in[0], c.pad, c.mode); },
                                         {flow::testing::grad_input(c.shape)}));
    // Squared after padding, so the second derivative runs the gradient's own vjp.
    EXPECT_TRUE(flow::testing::gradcheck(
        [&](const flow::TensorList& in) {
          const Tensor y = flow::sum(flow::pow(F::pad(in[0], c.pad, c.mode), 2) * in[1]);
          return flow::autograd::grad({y}, {in[0]}, {}, false, /*create_graph=*/true)[0];
        },
        {flow::testing::grad_input(c.shape), flow::testing::grad_input(F::pad(flow::zeros(c.shape), c.pad, c.mode).shape())}));
  }
}

TEST(Pad, ModeErrorsArePyTorchs) {
  const Tensor x = flow::zeros({1, 2, 3});
  EXPECT_THROW_MSG(F::pad(x, {3, 0}, "reflect"),
                   "[pad] Padding size should be less than the corresponding input dimension, but got: padding (3, 0) at dimension 2");
  EXPECT_THROW_MSG(F::pad(x, {-2, -1}, "reflect"), "[pad] input (W: 3) is too small. Calculated output W: 0");
  EXPECT_THROW_MSG(F::pad(x, {-2, -1}, "replicate"), "[pad] input (W: 3) is too small. Calculated output W: 0");
  EXPECT_THROW_MSG(F::pad(x, {4, 0}, "circular"), "[pad] Padding value causes wrapping around more than once.");
  // Cropped to one element, the other side may not wrap it more than once.
  EXPECT_THROW_MSG(F::pad(x, {3, -2}, "circular"), "[pad] Padding value causes wrapping around more than once.");
  EXPECT_THROW_MSG(F::pad(x, {1, 1}, "reflect", 1.0), "[pad] Padding mode \"reflect\" doesn't take in value argument");
  EXPECT_THROW_MSG(F::pad(flow::zeros({6}), {1, 1}, "reflect"), "[pad] Only 2D, 3D, 4D, 5D padding with non-constant padding");
  EXPECT_THROW_MSG(F::pad(flow::zeros({1, 1, 2, 3}), {1, 1}, "circular"), "[pad] Only 2D, 3D, 4D, 5D padding with non-constant padding");
  EXPECT_THROW_MSG(F::pad(flow::zeros({1, 1, 2, 3}), {}, "replicate"), "[pad] Only 2D, 3D, 4D, 5D padding with non-constant padding");
  EXPECT_THROW_MSG(F::pad(flow::zeros({1, 0, 3}), {1, 1}, "reflect"), "other non-zero dimensions for input, but got: (1,0,3)");
  EXPECT_THROW_MSG(F::pad(flow::zeros({1, 2, 0}), {1, 1}, "replicate"), "other non-zero dimensions for input");
}

TEST(PadModules, ForwardAndPrintAsPyTorch) {
  const Tensor x = flow::arange(0.0, 6.0).reshape({1, 2, 3});
  flow::nn::ReflectionPad1d reflect1(flow::nn::ReflectionPad1dOptions({2, 1}));
  EXPECT_TRUE(same(reflect1.forward(x), F::pad(x, {2, 1}, "reflect")));
  flow::nn::ReplicationPad1d replicate1(2);
  EXPECT_TRUE(same(replicate1.forward(x), F::pad(x, {2, 2}, "replicate")));
  const Tensor planes = flow::arange(0.0, 6.0).reshape({1, 1, 2, 3});
  flow::nn::ReflectionPad2d reflect2(1);
  EXPECT_TRUE(same(reflect2.forward(planes), F::pad(planes, {1, 1, 1, 1}, "reflect")));
  flow::nn::ReplicationPad2d replicate2(flow::nn::ReplicationPad2dOptions(0).padding({1, 0, 2, 1}));
  EXPECT_TRUE(same(replicate2.forward(planes), F::pad(planes, {1, 0, 2, 1}, "replicate")));
  flow::nn::ZeroPad2d zero2(flow::nn::ZeroPad2dOptions({1, 1, 2, 0}));
  EXPECT_TRUE(same(zero2.forward(planes), F::pad(planes, {1, 1, 2, 0})));
  flow::nn::ConstantPad1d constant1(flow::nn::ConstantPad1dOptions(2, 3.5));
  EXPECT_TRUE(same(constant1.forward(x), F::pad(x, {2, 2}, "constant", 3.5)));
  flow::nn::ConstantPad2d constant2(flow::nn::ConstantPad2dOptions(1, 0).value(-1));
  EXPECT_TRUE(same(constant2.forward(planes), F::pad(planes, {1, 1, 1, 1}, "constant", -1)));
  std::ostringstream out;
  out << reflect1 << " " << replicate2 << " " << zero2 << " " << constant1 << " " << constant2;
  EXPECT_EQ(out.str(),
            "ReflectionPad1d((2, 1)) ReplicationPad2d((1, 0, 2, 1)) ZeroPad2d((1, 1, 2, 0)) ConstantPad1d(padding=(2, 2), value=3.5) "
            "ConstantPad2d(padding=(1, 1, 1, 1), value=-1)");
  EXPECT_THROW_MSG(flow::nn::ReflectionPad2d(flow::nn::ReflectionPad2dOptions({1, 1})), "[ReflectionPad2d] padding must be one size or 4 sizes, got 2");
}

}  // namespace
