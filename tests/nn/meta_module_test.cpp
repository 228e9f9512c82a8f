// Meta tensors through autograd and modules: shapes without data, at any size.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "core/ops/all.h"
#include "nn/modules.h"

using flow::Tensor;
using flow::TensorOptions;

TEST(MetaDevice, AutogradGivesGradientsOfTheRightShapes) {
  const TensorOptions meta = TensorOptions().device(flow::kMeta);
  Tensor w = flow::randn({16, 4}, meta).requires_grad_();
  Tensor x = flow::randn({8, 16}, meta);
  flow::matmul(x, w).relu().mean().backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().shape(), w.shape());
  EXPECT_TRUE(w.grad().device().is_meta());
}

TEST(MetaDevice, ModulesBuiltUnderTheGuardTakeNoMemory) {
  std::shared_ptr<flow::nn::Linear> huge;
  {
    flow::DefaultDeviceGuard meta(flow::kMeta);
    huge = std::make_shared<flow::nn::Linear>(1 << 20, 1 << 16);  // 256 GiB of weights with data
  }
  EXPECT_TRUE(huge->weight.device().is_meta());
  EXPECT_EQ(huge->weight.shape(), flow::Shape({1 << 16, 1 << 20}));
  const Tensor y = huge->forward(flow::randn({8, 1 << 20}, TensorOptions().device(flow::kMeta)));
  EXPECT_EQ(y.shape(), flow::Shape({8, 1 << 16}));
  EXPECT_TRUE(y.device().is_meta());
  EXPECT_THROW_MSG(huge->forward(flow::empty({8, 1 << 20})), "expected all tensors on the same device");
}

TEST(MetaDevice, ModuleMovesToMeta) {
  flow::nn::Linear linear(4, 3);
  linear.to(flow::kMeta);
  EXPECT_TRUE(linear.weight.device().is_meta());
  EXPECT_TRUE(linear.bias.device().is_meta());
  EXPECT_EQ(linear.forward(flow::zeros({2, 4}, TensorOptions().device(flow::kMeta))).shape(), flow::Shape({2, 3}));
}
