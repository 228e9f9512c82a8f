#include <gtest/gtest.h>

#include <vector>

#include "autograd/engine.h"
#include "common/test_util.h"
#include "core/flow.h"

using flow::Tensor;

TEST(PostAccumulateGradHook, SeesTheAccumulatedGradientOncePerBackward) {
  auto x = flow::tensor<float>({1, 2}).requires_grad_();
  std::vector<std::vector<float>> seen;
  x.register_post_accumulate_grad_hook([&](Tensor& leaf) { seen.push_back(leaf.grad().tolist<float>()); });
  auto y = x * x;
  (y + x).sum().backward();  // x is used three times but accumulates once
  (x * 3).sum().backward();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], (std::vector<float>{3, 5}));
  EXPECT_EQ(seen[1], (std::vector<float>{6, 8}));
}

TEST(PostAccumulateGradHook, MayRewriteTheGradientAndRunsInRegistrationOrder) {
  auto x = flow::tensor<float>({1, 2}).requires_grad_();
  std::vector<int> order;
  x.register_post_accumulate_grad_hook([&](Tensor& leaf) {
    order.push_back(1);
    leaf.grad().copy_(leaf.grad() * 10);
  });
  x.register_post_accumulate_grad_hook([&](Tensor& leaf) {
    order.push_back(2);
    EXPECT_EQ(leaf.grad().tolist<float>(), (std::vector<float>{20, 20}));
  });
  (x * 2).sum().backward();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_EQ(x.grad().tolist<float>(), (std::vector<float>{20, 20}));
}

TEST(PostAccumulateGradHook, RemoveStopsItAndAHookMayRemoveItself) {
  auto x = flow::tensor<float>({1}).requires_grad_();
  int calls = 0;
  flow::RemovableHandle self;
  self = x.register_post_accumulate_grad_hook([&](Tensor&) {
    ++calls;
    self.remove();
  });
  int other_calls = 0;
  auto other = x.register_post_accumulate_grad_hook([&](Tensor&) { ++other_calls; });
  x.sum().backward();
  x.sum().backward();
  other.remove();
  other.remove();
  x.sum().backward();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(other_calls, 2);
}

TEST(PostAccumulateGradHook, NotRunByAutogradGrad) {
  auto x = flow::tensor<float>({1}).requires_grad_();
  int calls = 0;
  x.register_post_accumulate_grad_hook([&](Tensor&) { ++calls; });
  flow::autograd::grad({(x * x).sum()}, {x});
  EXPECT_EQ(calls, 0);
  EXPECT_FALSE(x.grad().defined());
}

TEST(PostAccumulateGradHook, OnlyOnLeavesThatRequireGrad) {
  auto plain = flow::tensor<float>({1});
  EXPECT_THROW_MSG(plain.register_post_accumulate_grad_hook([](Tensor&) {}), "doesn't require gradient");
  auto x = flow::tensor<float>({1}).requires_grad_();
  auto y = x * 2;
  EXPECT_THROW_MSG(y.register_post_accumulate_grad_hook([](Tensor&) {}), "non-leaf tensors");
}
