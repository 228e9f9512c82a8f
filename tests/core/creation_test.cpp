#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "common/test_util.h"
#include "core/flow.h"

using flow::Shape;
using flow::Tensor;

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
  EXPECT_EQ(flow::linspace(3, 5, 1).tolist<float>(), (std::vector<float>{3.f}));  // start, as PyTorch and NumPy
  EXPECT_EQ(flow::linspace(3, 5, 2).tolist<float>(), (std::vector<float>{3.f, 5.f}));
  EXPECT_EQ(flow::linspace(5, -1, 4, flow::kInt64).tolist<int64_t>(), (std::vector<int64_t>{5, 3, 1, -1}));
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
  int32_t raw[4] = {1, -2, 3, -4};
  auto r = flow::from_blob(raw, {2, 2}, flow::kInt32).to(flow::kFloat32);
  EXPECT_EQ(r.dtype(), flow::kFloat32);
  EXPECT_EQ(r.tolist<float>(), (std::vector<float>{1, -2, 3, -4}));
}

// torch::from_blob: the caller's memory, not a copy of it.
TEST(Creation, FromBlobWrapsTheCallersMemory) {
  std::vector<float> buffer{1, 2, 3, 4, 5, 6};
  Tensor t = flow::from_blob(buffer.data(), {2, 3});
  EXPECT_EQ(t.dtype(), flow::kFloat32);
  EXPECT_EQ(t.data_ptr(), static_cast<void*>(buffer.data()));
  buffer[4] = 50;
  EXPECT_EQ(t[1].tolist<float>(), (std::vector<float>{4, 50, 6}));
  t.select(0, 0).fill_(-1.0);
  EXPECT_EQ(buffer, (std::vector<float>{-1, -1, -1, 4, 50, 6}));
  Tensor copy = t.clone();
  buffer[0] = 7;
  EXPECT_EQ(copy.tolist<float>()[0], -1.0f);

  // Strides in elements: a column-major 2x3 matrix.
  double column_major[6] = {1, 4, 2, 5, 3, 6};
  Tensor m = flow::from_blob(column_major, {2, 3}, flow::Strides{1, 2}, flow::kFloat64);
  EXPECT_FALSE(m.is_contiguous());
  EXPECT_EQ(m.contiguous().tolist<double>(), (std::vector<double>{1, 2, 3, 4, 5, 6}));

  // With a deleter the tensor owns the memory: it is freed once, after the last view is gone.
  int deleted = 0;
  auto* owned = new int64_t[3]{7, 8, 9};
  {
    Tensor o = flow::from_blob(owned, {3}, [&](void* p) { ++deleted; delete[] static_cast<int64_t*>(p); }, flow::kInt64);
    Tensor view = o.slice(0, 1, 3);
    o = Tensor();
    EXPECT_EQ(deleted, 0);
    EXPECT_EQ(view.tolist<int64_t>(), (std::vector<int64_t>{8, 9}));
  }
  EXPECT_EQ(deleted, 1);

  float leaf_data[2] = {1, 2};
  Tensor leaf = flow::from_blob(leaf_data, {2}, flow::TensorOptions().requires_grad(true));
  EXPECT_TRUE(leaf.requires_grad());
  EXPECT_TRUE(leaf.is_leaf());

  EXPECT_THROW_MSG(flow::from_blob(nullptr, {2}), "[from_blob] data is null");
  EXPECT_EQ(flow::from_blob(nullptr, {0, 3}).numel(), 0);
  EXPECT_THROW_MSG(flow::from_blob(buffer.data(), {2}, flow::kMeta), "[from_blob] a meta tensor has no data to wrap");
  EXPECT_THROW_MSG(flow::from_blob(buffer.data(), {2, 3}, flow::Strides{1}), "[from_blob] shape (2,3) and strides (1,) differ in length");
  EXPECT_THROW_MSG(flow::from_blob(buffer.data(), {2}, flow::Strides{-1}), "[from_blob] strides must be non-negative");
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
