#include <gtest/gtest.h>

#include "common/test_util.h"
#include "core/flow.h"

using flow::Shape;

TEST(View, ReshapeSharesStorageWhenContiguous) {
  auto a = flow::arange(12);
  auto b = a.reshape({3, 4});
  EXPECT_EQ(b.shape(), (Shape{3, 4}));
  EXPECT_EQ(b.storage().get(), a.storage().get());
  EXPECT_EQ(a.view({2, -1}).shape(), (Shape{2, 6}));
}

TEST(View, TransposeIsAStridedView) {
  auto a = flow::arange(6).reshape({2, 3});
  auto t = a.t();
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(t.strides(), (flow::Strides{1, 3}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.contiguous().tolist<int64_t>(), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(t.reshape({6}).tolist<int64_t>(), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
}

TEST(View, ViewOfNonViewableThrows) {
  auto t = flow::arange(6).reshape({2, 3}).t();
  EXPECT_THROW_MSG(t.view({6}), "[view] view size (6,) is not compatible");
}

TEST(View, PermuteSliceSelectNarrow) {
  auto a = flow::arange(24).reshape({2, 3, 4});
  auto p = a.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.select(0, 1).contiguous().tolist<int64_t>(), (std::vector<int64_t>{1, 5, 9, 13, 17, 21}));
  auto s = a.slice(2, 1, 4, 2);
  EXPECT_EQ(s.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(s.select(0, 0).select(0, 0).tolist<int64_t>(), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(a.narrow(1, 1, 2).shape(), (Shape{2, 2, 4}));
  EXPECT_EQ(a.slice(0, -1, 100).shape(), (Shape{1, 3, 4}));
  EXPECT_EQ(a.slice(1, 2, 1).shape(), (Shape{2, 0, 4}));
  EXPECT_EQ(a[1][2].tolist<int64_t>(), (std::vector<int64_t>{20, 21, 22, 23}));
}

TEST(View, ExpandSqueezeUnsqueezeFlatten) {
  auto a = flow::arange(3).reshape({3, 1});
  auto e = a.expand({2, 3, 4});
  EXPECT_EQ(e.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(e.stride(0), 0);
  EXPECT_EQ(e.stride(2), 0);
  EXPECT_EQ(e.contiguous().select(1, 1).select(0, 1).tolist<int64_t>(), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(a.squeeze().shape(), (Shape{3}));
  EXPECT_EQ(a.squeeze(0).shape(), (Shape{3, 1}));
  EXPECT_EQ(a.unsqueeze(0).shape(), (Shape{1, 3, 1}));
  EXPECT_EQ(a.unsqueeze(-1).shape(), (Shape{3, 1, 1}));
  EXPECT_EQ(e.flatten(1).shape(), (Shape{2, 12}));
  EXPECT_EQ(e.flatten().shape(), (Shape{24}));
  EXPECT_EQ(flow::full({}, 2.0).flatten().shape(), (Shape{1}));
}

TEST(View, ErrorsNameTheOp) {
  auto a = flow::zeros({2, 3});
  EXPECT_THROW_MSG(a.reshape({4, 2}), "[reshape] shape (4,2) is invalid for input of size 6");
  EXPECT_THROW_MSG(a.reshape({-1, -1}), "[reshape] only one dimension can be inferred");
  EXPECT_THROW_MSG(a.transpose(0, 2), "[transpose] dim 2 out of range");
  EXPECT_THROW_MSG(a.permute({0, 0}), "[permute] repeated dim 0");
  EXPECT_THROW_MSG(a.permute({0}), "[permute] number of dims 1");
  EXPECT_THROW_MSG(a.select(1, 3), "[select] index 3 is out of bounds for dimension 1 with size 3");
  EXPECT_THROW_MSG(a.narrow(1, 2, 2), "[narrow] start (2) + length (2) exceeds dimension size (3)");
  EXPECT_THROW_MSG(a.expand({3, 3}), "[expand] the expanded size of the tensor (3) must match the existing size (2)");
  EXPECT_THROW_MSG(a.slice(0, 0, 1, 0), "[slice] step must be positive");
  EXPECT_THROW_MSG(flow::Tensor().dim(), "[tensor] use of an undefined tensor");
}
