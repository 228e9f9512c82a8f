// In-place writes through views (PyTorch's view + in-place rebase): the base's history goes through
// the write, so the written source gets its gradient and the overwritten positions pass none to
// what the base was computed from; views made before a write see their base's new history.
#include <gtest/gtest.h>

#include "autograd/node.h"
#include "common/gradcheck.h"
#include "common/test_util.h"
#include "core/flow.h"
#include "core/grad_mode.h"

using flow::Shape;
using flow::Tensor;
using flow::TensorList;
using flow::testing::grad_input;
using flow::testing::gradcheck;

namespace {

std::vector<double> values(const Tensor& t) { return t.contiguous().tolist<double>(); }

}  // namespace

TEST(InPlaceView, CopyIntoASliceOfAComputedTensor) {
  // The case: y requires grad through an op; a slice of it is overwritten by x.
  Tensor w = flow::ones({4, 3}, flow::kFloat64).requires_grad_();
  Tensor x = flow::full({2, 3}, 5.0, flow::kFloat64).requires_grad_();
  Tensor y = w * 2.0;
  y.slice(0, 1, 3).copy_(x);
  EXPECT_EQ(values(y), (std::vector<double>{2, 2, 2, 5, 5, 5, 5, 5, 5, 2, 2, 2}));
  const Tensor coefficients = flow::arange(12, flow::kFloat64).reshape({4, 3});
  (y * coefficients).sum().backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(values(x.grad()), (std::vector<double>{3, 4, 5, 6, 7, 8}));
  // Rows 1 and 2 of w were overwritten: no gradient reaches them.
  EXPECT_EQ(values(w.grad()), (std::vector<double>{0, 2, 4, 0, 0, 0, 0, 0, 0, 18, 20, 22}));
  EXPECT_EQ(y.grad_fn()->name(), "CopySlices");
}

TEST(InPlaceView, BaseThatDidNotRequireGradGetsAHistory) {
  Tensor x = flow::tensor<double>({1, 2}).requires_grad_();
  Tensor y = flow::zeros({3, 2}, flow::kFloat64);
  EXPECT_FALSE(y.requires_grad());
  y.select(0, 2).copy_(x * 3.0);
  EXPECT_TRUE(y.requires_grad());
  EXPECT_FALSE(y.is_leaf());
  (y * y).sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{18, 36}));  // d/dx (3x)^2
}

TEST(InPlaceView, NonContiguousViewsAndViewsOfViews) {
  Tensor x = flow::tensor<double>({7, 8, 9}).requires_grad_();
  Tensor w = flow::ones({3, 4}, flow::kFloat64).requires_grad_();
  Tensor y = w * 1.0;
  y.slice(1, 1, 4, 2).select(0, 2).copy_(x.slice(0, 0, 2));  // y[2, 1] = 7, y[2, 3] = 8
  y.t().select(0, 0).fill_(0.0);                             // column 0 of y zeroed through a transpose
  EXPECT_EQ(values(y), (std::vector<double>{0, 1, 1, 1, 0, 1, 1, 1, 0, 7, 1, 8}));
  const Tensor coefficients = flow::arange(12, flow::kFloat64).reshape({3, 4}) + 1.0;
  (y * coefficients).sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{10, 12, 0}));
  EXPECT_EQ(values(w.grad()), (std::vector<double>{0, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 0}));
}

TEST(InPlaceView, ViewMadeBeforeTheWriteSeesTheNewHistory) {
  Tensor x = flow::tensor<double>({10, 20}).requires_grad_();
  Tensor y = flow::zeros({4}, flow::kFloat64);
  Tensor earlier = y.slice(0, 0, 3);  // overlaps the written positions 2..3 at 2
  y.slice(0, 2, 4).copy_(x);
  EXPECT_EQ(values(earlier), (std::vector<double>{0, 0, 10}));
  (earlier * 5.0).sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{5, 0}));

  // A write of the base itself reaches views made before it.
  Tensor w = flow::tensor<double>({1, 2, 3}).requires_grad_();
  Tensor z = flow::tensor<double>({4, 5, 6}).requires_grad_();
  Tensor base = w * 1.0;
  Tensor view = base.select(0, 1);
  base.copy_(z * 2.0);
  EXPECT_EQ(view.item<double>(), 10.0);
  (view * 3.0).backward();
  EXPECT_EQ(values(z.grad()), (std::vector<double>{0, 6, 0}));
  EXPECT_FALSE(w.grad().defined() && values(w.grad()) != std::vector<double>(3, 0.0));
}

TEST(InPlaceView, TheWrittenViewCarriesTheWriteAndTheBaseTheRest) {
  Tensor x = flow::tensor<double>({2, 3}).requires_grad_();
  Tensor w = flow::tensor<double>({1, 1, 1, 1}).requires_grad_();
  Tensor y = w * 4.0;
  Tensor view = y.slice(0, 1, 3);
  view.copy_(x);
  // Both the view and its base are read afterwards: gradients through each add up.
  (view * 10.0).sum().backward(Tensor(), /*retain_graph=*/true);
  EXPECT_EQ(values(x.grad()), (std::vector<double>{10, 10}));
  y.sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{11, 11}));
  EXPECT_EQ(values(w.grad()), (std::vector<double>{4, 0, 0, 4}));
}

TEST(InPlaceView, PassesTheGradientChecker) {
  flow::manual_seed(3);
  auto x = grad_input({2, 2}), w = grad_input({3, 4});
  EXPECT_TRUE(gradcheck(
      [](const TensorList& in) {
        Tensor y = in[1] * in[1];  // mul saves its inputs, not y, which is written below
        y.slice(1, 1, 3).slice(0, 0, 2).copy_(in[0] * in[0]);
        Tensor earlier = y.select(0, 0);
        y.select(1, 3).copy_(y.select(1, 0) * 3.0 + 1.0);
        return y * earlier;
      },
      {x, w}));
}

TEST(InPlaceView, WritesThatCannotBeDifferentiatedAreErrors) {
  Tensor leaf = flow::zeros({2, 3}).requires_grad_();
  EXPECT_THROW_MSG(leaf.select(0, 0).copy_(flow::ones({3})), "a view of a leaf tensor that requires grad is being used in an in-place operation");
  {
    flow::autograd::NoGradGuard no_grad;
    leaf.select(0, 0).fill_(1.0);  // allowed without grad mode, as in PyTorch
  }
  EXPECT_EQ(leaf.tolist<float>(), (std::vector<float>{1, 1, 1, 0, 0, 0}));

  Tensor source = flow::ones({1, 3}).requires_grad_();
  Tensor base = source * 1.0;
  EXPECT_THROW_MSG(base.expand({4, 3}).copy_(flow::ones({4, 3}).requires_grad_()),
                   "more than one element of the written-to tensor (4,3) (strides (0,1)) refers to a single memory location");
}

TEST(InPlaceView, DetachedAndNoGradViewsWriteDataOnly) {
  Tensor x = flow::tensor<double>({1, 2}).requires_grad_();
  Tensor y = x * 1.0;
  y.detach().select(0, 0).fill_(9.0);  // no history: y's data changes, its history does not
  EXPECT_EQ(values(y), (std::vector<double>{9, 2}));
  y.sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{1, 1}));
}
