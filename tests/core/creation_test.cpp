#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "common/test_util.h"
#include "core/flow.h"

using flow::Shape;

TEST(Creation, FullZerosOnesEmptyDefaults) {
  auto z = flow::zeros({2, 3});
  EXPECT_EQ(z.dtype(), flow::kFloat32);
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.tolist<float>(), std::vector<float>(6, 0.f));
  EXPECT_EQ(flow::ones({4}, flow::kInt32).tolist<int32_t>(), std::vector<int32_t>(4, 1));
  EXPECT_EQ(flow::full({2}, 7).dtype(), flow::kInt64);
  EXPECT_EQ(flow::full({2}, 2.5).dtype(), flow::kFloat32);
  EXPECT_EQ(flow::full({2}, true).dtype(), flow::kBool);
  EXPECT_EQ(flow::full({3}, 2.5, flow::kFloat64).tolist<double>(), std::vector<double>(3, 2.5));
  EXPECT_EQ(flow::empty({0, 3}).numel(), 0);
  EXPECT_EQ(flow::full({}, 3).dim(), 0);
  EXPECT_EQ(flow::full({}, 3).item<int64_t>(), 3);
}

TEST(Creation, HalfPrecisionRoundTrips) {
  auto h = flow::full({3}, 1.5, flow::kFloat16);
  EXPECT_EQ(h.tolist<float>(), std::vector<float>(3, 1.5f));
  auto b = flow::tensor<float>({1.f, -2.f, 3.140625f}).to(flow::kBFloat16);
  EXPECT_EQ(b.tolist<float>(), (std::vector<float>{1.f, -2.f, 3.140625f}));
  // 65504 is float16's largest finite value; 1e5 overflows to inf.
  auto big = flow::tensor<float>({65504.f, 1e5f, 6e-8f}).to(flow::kFloat16).to(flow::kFloat32);
  EXPECT_EQ(big.tolist<float>()[0], 65504.f);
  EXPECT_TRUE(std::isinf(big.tolist<float>()[1]));
  EXPECT_NEAR(big.tolist<float>()[2], 5.96e-8f, 1e-9f);
}

TEST(Creation, ArangeLinspaceEye) {
  EXPECT_EQ(flow::arange(5).tolist<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(flow::arange(5).dtype(), flow::kInt64);
  EXPECT_EQ(flow::arange(1, 10, 3).tolist<int64_t>(), (std::vector<int64_t>{1, 4, 7}));
  EXPECT_EQ(flow::arange(5, 0, -2).tolist<int64_t>(), (std::vector<int64_t>{5, 3, 1}));
  auto f = flow::arange(0.0, 1.0, 0.25);
  EXPECT_EQ(f.dtype(), flow::kFloat32);
  EXPECT_EQ(f.tolist<float>(), (std::vector<float>{0.f, 0.25f, 0.5f, 0.75f}));
  auto l = flow::linspace(-1, 1, 5, flow::kFloat64).tolist<double>();
  EXPECT_EQ(l, (std::vector<double>{-1, -0.5, 0, 0.5, 1}));
  EXPECT_EQ(flow::linspace(3, 3, 1).tolist<float>(), (std::vector<float>{3.f}));
  EXPECT_EQ(flow::linspace(0, 1, 0).numel(), 0);
  auto e = flow::eye(2, 3).tolist<float>();
  EXPECT_EQ(e, (std::vector<float>{1, 0, 0, 0, 1, 0}));
}

TEST(Creation, FromVectorAndBlob) {
  auto t = flow::tensor<double>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  EXPECT_EQ(t.dtype(), flow::kFloat64);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t[1].tolist<double>(), (std::vector<double>{4, 5, 6}));
  auto b = flow::tensor<bool>({true, false});
  EXPECT_EQ(b.dtype(), flow::kBool);
  EXPECT_EQ(b.tolist<bool>(), (std::vector<bool>{true, false}));
  const int32_t raw[4] = {1, -2, 3, -4};
  auto r = flow::from_blob(raw, {2, 2}, flow::kInt32, flow::kFloat32);
  EXPECT_EQ(r.dtype(), flow::kFloat32);
  EXPECT_EQ(r.tolist<float>(), (std::vector<float>{1, -2, 3, -4}));
}

TEST(Creation, LikeVariantsCopyMeta) {
  auto base = flow::arange(6, flow::kFloat64).reshape({2, 3});
  EXPECT_EQ(flow::zeros_like(base).dtype(), flow::kFloat64);
  EXPECT_EQ(flow::ones_like(base).shape(), (Shape{2, 3}));
  EXPECT_EQ(flow::full_like(base, 4).tolist<double>(), std::vector<double>(6, 4));
  EXPECT_EQ(flow::empty_like(base, flow::kInt8).dtype(), flow::kInt8);
  EXPECT_EQ(flow::rand_like(base).dtype(), flow::kFloat64);
  EXPECT_EQ(flow::randn_like(base).shape(), (Shape{2, 3}));
}

TEST(Creation, ArgumentErrors) {
  EXPECT_THROW_MSG(flow::zeros({2, -1}), "[full] negative dimension in shape (2,-1)");
  EXPECT_THROW_MSG(flow::arange(0, 5, 0), "[arange] step must be nonzero");
  EXPECT_THROW_MSG(flow::arange(5, 0, 1), "[arange] upper bound 0 and lower bound 5 inconsistent with step sign 1");
  EXPECT_THROW_MSG(flow::linspace(0, 1, -1), "[linspace] number of steps must be non-negative");
  EXPECT_THROW_MSG(flow::randint(3, 3, {2}), "[randint] expected low < high");
  EXPECT_THROW_MSG(flow::rand({2}, flow::kInt64), "[rand] expected a floating dtype, got int64");
  EXPECT_THROW_MSG(flow::tensor<float>({1, 2, 3}, Shape{2, 2}), "[tensor] shape (2,2) needs 4 values, got 3");
  EXPECT_THROW_MSG(flow::zeros({2}).item<float>(), "[item] a tensor with 2 elements cannot be converted to a scalar");
  EXPECT_THROW_MSG(flow::zeros({2}).data_ptr<double>(), "[data_ptr] requested float64 but the tensor is float32");
  if (!flow::cuda_is_available()) EXPECT_THROW_MSG(flow::zeros({2}, flow::Device("cuda:0")), "CUDA is not available");
  EXPECT_THROW_MSG(flow::Device("gpu"), "[device] invalid device string 'gpu'");
  EXPECT_THROW_MSG(flow::dtype_from_name("float8"), "[dtype] unknown dtype name 'float8'");
}
