#include <gtest/gtest.h>

#include "common/reference.h"
#include "common/test_util.h"

using flow::Shape;
using flow::Tensor;
using flow::testing::values;

TEST(Index, CatStackSplitChunk) {
  Tensor a = flow::arange(6).reshape({2, 3}), b = flow::arange(6, 12).reshape({2, 3});
  EXPECT_EQ(flow::cat({a, b}).tolist<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(flow::cat({a, b}, -1).tolist<int64_t>(), (std::vector<int64_t>{0, 1, 2, 6, 7, 8, 3, 4, 5, 9, 10, 11}));
  EXPECT_EQ(flow::cat({a.t(), b.t()}, 1).shape(), (Shape{3, 4}));
  EXPECT_EQ(flow::cat({a, flow::ones({1, 3})}).dtype(), flow::kFloat32);  // promotes
  EXPECT_EQ(flow::cat({a, flow::zeros({0, 3}, flow::kInt64)}).shape(), (Shape{2, 3}));
  Tensor s = flow::stack({a, b}, 1);
  EXPECT_EQ(s.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(s.select(1, 1).tolist<int64_t>(), b.tolist<int64_t>());
  auto parts = flow::split(flow::arange(7), 3);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].tolist<int64_t>(), (std::vector<int64_t>{6}));
  EXPECT_EQ(parts[1].storage().get(), parts[0].storage().get()) << "split returns views";
  auto sized = flow::split(a, std::vector<int64_t>{1, 2}, 1);
  EXPECT_EQ(sized[1].tolist<int64_t>(), (std::vector<int64_t>{1, 2, 4, 5}));
  auto chunks = flow::chunk(flow::arange(5), 3);
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[0].numel(), 2);
  EXPECT_EQ(chunks[2].numel(), 1);
}

TEST(Index, IndexSelectGather) {
  flow::manual_seed(9);
  Tensor x = flow::randn({4, 5, 3});
  Tensor idx = flow::tensor<int64_t>({3, 0, 3});
  Tensor sel = flow::index_select(x, 0, idx);
  EXPECT_EQ(sel.shape(), (Shape{3, 5, 3}));
  EXPECT_EQ(values(sel.select(0, 0)), values(x.select(0, 3)));
  EXPECT_EQ(values(flow::index_select(x.transpose(0, 1), 1, flow::tensor<int32_t>({-1}))), values(x.select(0, 3).unsqueeze(1)));
  Tensor g_idx = flow::tensor<int64_t>({2, 0, 1, 1}, Shape{2, 2});
  Tensor m = flow::arange(9, flow::kFloat64).reshape({3, 3});
  EXPECT_EQ(flow::gather(m, 1, g_idx).tolist<double>(), (std::vector<double>{2, 0, 4, 4}));
  EXPECT_EQ(flow::gather(m, 0, g_idx).tolist<double>(), (std::vector<double>{6, 1, 3, 4}));
}

TEST(Index, ScatterMaskedFillOneHot) {
  Tensor base = flow::zeros({3, 3});
  Tensor idx = flow::tensor<int64_t>({0, 2, 1, 1}, Shape{2, 2});
  Tensor src = flow::tensor<float>({1, 2, 3, 4}, Shape{2, 2});
  EXPECT_EQ(flow::scatter(base, 1, idx, src).tolist<float>(), (std::vector<float>{1, 0, 2, 0, 4, 0, 0, 0, 0}));
  EXPECT_EQ(flow::scatter_add(base, 1, idx, src).tolist<float>(), (std::vector<float>{1, 0, 2, 0, 7, 0, 0, 0, 0}));
  EXPECT_EQ(flow::scatter(base, 0, idx, 5.0).tolist<float>(), (std::vector<float>{5, 0, 0, 5, 5, 0, 0, 5, 0}));
  EXPECT_EQ(base.tolist<float>(), std::vector<float>(9, 0.f)) << "scatter is out of place";
  Tensor& written = flow::scatter_(base, 1, idx, src);
  EXPECT_EQ(&written, &base);
  EXPECT_EQ(base.tolist<float>(), (std::vector<float>{1, 0, 2, 0, 4, 0, 0, 0, 0})) << "scatter_ writes in place";
  Tensor rows = flow::zeros({3, 2});
  Tensor second_row = rows.slice(0, 1, 2);
  flow::scatter_(second_row, 1, flow::tensor<int64_t>({1}, Shape{1, 1}), flow::full({1, 1}, 7.0));
  EXPECT_EQ(rows.tolist<float>(), (std::vector<float>{0, 0, 0, 7, 0, 0})) << "through a contiguous view";
  Tensor columns = rows.t();
  EXPECT_THROW_MSG(flow::scatter_(columns, 0, flow::tensor<int64_t>({0}, Shape{1, 1}), flow::ones({1, 1})),
                   "[scatter_inplace] writes in place and needs contiguous tensors");
  Tensor x = flow::arange(6, flow::kFloat32).reshape({2, 3});
  Tensor mask = flow::tensor<bool>({true, false, true});
  EXPECT_EQ(flow::masked_fill(x, mask, -1).tolist<float>(), (std::vector<float>{-1, 1, -1, -1, 4, -1}));
  EXPECT_EQ(flow::masked_fill(x.t(), flow::tensor<bool>({false, true}), 9).tolist<float>(),
            (std::vector<float>{0, 9, 1, 9, 2, 9}));
  Tensor oh = flow::one_hot(flow::tensor<int64_t>({2, 0}));
  EXPECT_EQ(oh.shape(), (Shape{2, 3}));
  EXPECT_EQ(oh.tolist<int64_t>(), (std::vector<int64_t>{0, 0, 1, 1, 0, 0}));
  EXPECT_EQ(flow::one_hot(flow::tensor<int64_t>({1}), 4).shape(), (Shape{1, 4}));
}

TEST(Index, Errors) {
  Tensor x = flow::zeros({5, 2});
  EXPECT_THROW_MSG(flow::index_select(x, 0, flow::tensor<int64_t>({7})), "[index_select] index 7 is out of bounds for dimension 0 with size 5");
  EXPECT_THROW_MSG(flow::index_select(x, 0, flow::tensor<float>({1})), "[index_select] expected an int64 or int32 index tensor, got float32");
  EXPECT_THROW_MSG(flow::gather(x, 1, flow::tensor<int64_t>({2}, Shape{1, 1})), "[gather] index 2 is out of bounds for dimension 1 with size 2");
  EXPECT_THROW_MSG(flow::gather(x, 1, flow::tensor<int64_t>({0})), "[gather] index (1,) must have the same number of dimensions as input (5,2)");
  EXPECT_THROW_MSG(flow::scatter(x, 0, flow::tensor<int64_t>({9}, Shape{1, 1}), 1.0), "[scatter] index 9 is out of bounds");
  EXPECT_THROW_MSG(flow::cat({flow::zeros({2, 3}), flow::zeros({2, 4, 1})}, 1), "[cat] tensors must have the same number of dimensions");
  EXPECT_THROW_MSG(flow::cat({flow::zeros({2, 3}), flow::zeros({3, 4})}, 1), "[cat] sizes of tensors must match except in dimension 1: got (2,3) and (3,4)");
  EXPECT_THROW_MSG(flow::cat({}), "[cat] expected a non-empty list");
  EXPECT_THROW_MSG(flow::stack({flow::zeros({2}), flow::zeros({3})}), "[stack] expects each tensor to be equal size");
  EXPECT_THROW_MSG(flow::split(x, std::vector<int64_t>{1, 1}), "[split] split sizes (1,1) sum to 2 but dimension 0 has size 5");
  EXPECT_THROW_MSG(flow::masked_fill(x, flow::ones({2}), 0), "[masked_fill] mask must be a bool tensor");
  EXPECT_THROW_MSG(flow::one_hot(flow::tensor<int64_t>({3}), 2), "[one_hot] class index 3 is out of range [0, 2)");
}
