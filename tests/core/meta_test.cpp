// Meta tensors: shape, dtype and strides without data. Ops run their meta inference (and so
// their argument checks) and nothing else.
#include <gtest/gtest.h>

#include <sstream>

#include "common/test_util.h"
#include "core/ops/all.h"

using flow::Device;
using flow::Tensor;
using flow::TensorOptions;

TEST(MetaDevice, ParsesPrintsAndComparesLikeOtherDevices) {
  const Device meta("meta");
  EXPECT_TRUE(meta.is_meta());
  EXPECT_FALSE(meta.is_cpu());
  EXPECT_EQ(meta, flow::kMeta);
  EXPECT_EQ(meta.str(), "meta");
  EXPECT_THROW_MSG(Device("metal"), "[device] invalid device string 'metal' (expected 'cpu', 'cuda', 'cuda:N' or 'meta')");
}

TEST(MetaDevice, CreationGivesShapesWithoutData) {
  const Tensor x = flow::randn({4, 1000, 1000, 1000}, TensorOptions().device(flow::kMeta));  // 16 GB if it had data
  EXPECT_EQ(x.shape(), flow::Shape({4, 1000, 1000, 1000}));
  EXPECT_EQ(x.dtype(), flow::kFloat32);
  EXPECT_TRUE(x.device().is_meta());
  EXPECT_TRUE(x.is_contiguous());
  EXPECT_THROW_MSG(x.data_ptr(), "[data_ptr] a meta tensor has a shape and a dtype but no data");
  EXPECT_THROW_MSG(x.sum().item<float>(), "[to] cannot copy out of a meta tensor: it has no data");
  std::ostringstream printed;
  printed << flow::zeros({2, 3}, TensorOptions(flow::kInt64).device("meta"));
  EXPECT_EQ(printed.str(), "tensor(..., size=(2, 3), device='meta', dtype=flow.int64)");
}

TEST(MetaDevice, OpsInferShapesAndKeepTheirChecks) {
  const TensorOptions meta = TensorOptions().device(flow::kMeta);
  const Tensor a = flow::randn({8, 16}, meta);
  const Tensor b = flow::randn({16, 4}, meta);
  const Tensor y = flow::relu(flow::matmul(a, b)).softmax(1).sum(std::vector<int64_t>{0}, /*keepdim=*/true);
  EXPECT_EQ(y.shape(), flow::Shape({1, 4}));
  EXPECT_TRUE(y.device().is_meta());
  EXPECT_EQ(a.t().reshape({4, 32}).shape(), flow::Shape({4, 32}));
  EXPECT_THROW_MSG(flow::matmul(a, a), "[matmul] size mismatch");
  EXPECT_THROW_MSG(a + flow::randn({8, 16}), "[add] expected all tensors on the same device, got meta and cpu");
  Tensor written = flow::zeros({8, 16}, meta);
  written.fill_(2.5);
  EXPECT_EQ(written.shape(), flow::Shape({8, 16}));
}

TEST(MetaDevice, MovesOntoMetaButNotOff) {
  const Tensor cpu = flow::arange(6).reshape({2, 3});
  const Tensor meta = cpu.to(flow::kMeta);
  EXPECT_TRUE(meta.device().is_meta());
  EXPECT_EQ(meta.shape(), cpu.shape());
  EXPECT_EQ(meta.dtype(), flow::kInt64);
  EXPECT_THROW_MSG(meta.cpu(), "[to] cannot copy out of a meta tensor: it has no data");
  Tensor target = flow::zeros({2, 3}, flow::kInt64);
  EXPECT_THROW_MSG(target.copy_(meta), "[copy_] cannot copy out of a meta tensor: it has no data");
  Tensor meta_target = flow::zeros({2, 3}, TensorOptions(flow::kInt64).device(flow::kMeta));
  meta_target.copy_(cpu);  // writing into a meta tensor stores nothing, as in PyTorch
  EXPECT_TRUE(meta_target.device().is_meta());
}

TEST(MetaDevice, DefaultDeviceGuardMakesCreationMeta) {
  const Tensor on_cpu = flow::arange(3);
  {
    flow::DefaultDeviceGuard guard(flow::kMeta);
    EXPECT_TRUE(flow::default_device().is_meta());
    EXPECT_TRUE(flow::zeros({3}).device().is_meta());
    EXPECT_TRUE(flow::randn({3}, flow::kFloat64).device().is_meta());
    // Explicit devices win, and *_like follows its argument.
    EXPECT_TRUE(flow::zeros({3}, TensorOptions().device(flow::kCPU)).device().is_cpu());
    EXPECT_TRUE(flow::zeros_like(on_cpu).device().is_cpu());
  }
  EXPECT_TRUE(flow::default_device().is_cpu());
  EXPECT_TRUE(flow::zeros({3}).device().is_cpu());
}
