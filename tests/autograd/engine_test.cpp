#include <gtest/gtest.h>

#include "autograd/engine.h"
#include "autograd/node.h"
#include "common/test_util.h"
#include "core/flow.h"
#include "core/grad_mode.h"

using flow::Tensor;

TEST(Autograd, BackwardFillsLeafGradients) {
  auto x = flow::tensor<float>({1, 2, 3}).requires_grad_();
  auto w = flow::tensor<float>({4, 5, 6}).requires_grad_();
  auto y = (x * w).sum();
  EXPECT_FALSE(y.is_leaf());
  EXPECT_EQ(y.grad_fn()->name(), "reduce_sum_backward");
  y.backward();
  EXPECT_EQ(x.grad().tolist<float>(), (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(w.grad().tolist<float>(), (std::vector<float>{1, 2, 3}));
}

TEST(Autograd, GradientsAccumulateAcrossCalls) {
  auto x = flow::tensor<float>({1, 2}).requires_grad_();
  (x * 3).sum().backward();
  (x * x).sum().backward();
  EXPECT_EQ(x.grad().tolist<float>(), (std::vector<float>{5, 7}));
  x.grad().zero_();
  (x * 2).sum().backward();
  EXPECT_EQ(x.grad().tolist<float>(), (std::vector<float>{2, 2}));
}

TEST(Autograd, ReusedTensorSumsItsGradients) {
  auto x = flow::tensor<double>({2.0}).requires_grad_();
  auto a = x * x;  // x^2
  auto b = a * x;  // x^3
  auto c = a + b;  // d/dx = 2x + 3x^2 = 4 + 12
  c.sum().backward();
  EXPECT_DOUBLE_EQ(x.grad().item<double>(), 16.0);
}

TEST(Autograd, SecondBackwardNeedsRetainGraph) {
  auto x = flow::tensor<float>({1, 2}).requires_grad_();
  auto y = (x * x).sum();
  y.backward();
  EXPECT_THROW_MSG(y.backward(), "retain_graph=true");
  auto z = (x * x).sum();
  z.backward(Tensor(), /*retain_graph=*/true);
  z.backward();
  EXPECT_EQ(x.grad().tolist<float>(), (std::vector<float>{6, 12}));
}

TEST(Autograd, NonScalarNeedsGradient) {
  auto x = flow::tensor<float>({1, 2}).requires_grad_();
  auto y = x * 2;
  EXPECT_THROW_MSG(y.backward(), "grad can be implicitly created only for scalar outputs");
  y.backward(flow::tensor<float>({1, 10}));
  EXPECT_EQ(x.grad().tolist<float>(), (std::vector<float>{2, 20}));
  EXPECT_THROW_MSG((x * 2).backward(flow::ones({3})), "mismatch in shape");
}

TEST(Autograd, RetainGradKeepsNonLeafGradient) {
  auto x = flow::tensor<float>({1, 2}).requires_grad_();
  auto h = x * 3;
  h.retain_grad();
  auto other = x * 5;
  (h * h).sum().backward();
  EXPECT_EQ(h.grad().tolist<float>(), (std::vector<float>{6, 12}));
  EXPECT_FALSE(other.grad().defined());
  EXPECT_EQ(x.grad().tolist<float>(), (std::vector<float>{18, 36}));
}

TEST(Autograd, NoGradAndDetach) {
  auto x = flow::ones({2}).requires_grad_();
  {
    flow::autograd::NoGradGuard guard;
    auto y = x * 2;
    EXPECT_FALSE(y.requires_grad());
  }
  auto d = (x * 2).detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_THROW_MSG(d.sum().backward(), "does not require grad");
  EXPECT_THROW_MSG(flow::ones({2}, flow::kInt64).requires_grad_(), "only tensors of floating point dtype");
  EXPECT_THROW_MSG((x * 2).requires_grad_(false), "only change requires_grad flags of leaf tensors");
}

TEST(Autograd, InPlaceChangeOfSavedValueIsReported) {
  auto x = flow::tensor<float>({1, 2}).requires_grad_();
  auto y = x * 1;  // non-leaf
  auto z = y * y;  // saves y
  y.copy_(flow::zeros({2}));
  EXPECT_THROW_MSG(z.sum().backward(), "modified by an in-place operation");
  EXPECT_THROW_MSG(x.copy_(flow::zeros({2})), "a leaf tensor that requires grad is being used in an in-place");
  flow::autograd::NoGradGuard guard;
  x.copy_(flow::zeros({2}));  // allowed without grad mode, like optimizer updates
  EXPECT_EQ(x.tolist<float>(), (std::vector<float>{0, 0}));
}

TEST(Autograd, GradFunctionAndHigherOrder) {
  auto x = flow::tensor<double>({1.5, -2.0}).requires_grad_();
  auto y = (x * x * x).sum();  // dy/dx = 3x^2, d2y/dx2 = 6x
  auto g = flow::autograd::grad({y}, {x}, {}, false, /*create_graph=*/true)[0];
  EXPECT_EQ(g.tolist<double>(), (std::vector<double>{6.75, 12.0}));
  EXPECT_FALSE(x.grad().defined()) << "grad() must not accumulate into leaves";
  auto gg = flow::autograd::grad({g.sum()}, {x})[0];
  EXPECT_EQ(gg.tolist<double>(), (std::vector<double>{9.0, -12.0}));
  auto unused = flow::ones({1}).requires_grad_();
  auto z = (x * 2).sum();
  EXPECT_THROW_MSG(flow::autograd::grad({z}, {unused}), "was not used in the graph");
  auto z2 = (x * 2).sum();
  EXPECT_FALSE(flow::autograd::grad({z2}, {unused}, {}, false, false, true)[0].defined());
}

TEST(Autograd, LeafGradientNeverAliasesCallerTensors) {
  auto x = flow::tensor<float>({1, 2}).requires_grad_();
  auto g = flow::tensor<float>({5, 6});
  x.backward(g);  // the leaf itself is the root: its gradient is the caller's tensor
  g.fill_(0);
  EXPECT_EQ(x.grad().tolist<float>(), (std::vector<float>{5, 6}));
  auto y = (x * 2).sum();
  x.grad().zero_();
  y.backward();
  EXPECT_EQ(x.grad().tolist<float>(), (std::vector<float>{2, 2}));
}
