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

namespace {

// scatter by its definition, one index entry after another in index order:
// out[p with p[dim] = index[p]] = src[p] (or +=), over float values in row-major order.
std::vector<float> scatter_by_definition(const Tensor& input, int64_t dim, const Tensor& index, const Tensor& src, bool add) {
  std::vector<float> out = input.contiguous().tolist<float>();
  const std::vector<int64_t> entries = index.contiguous().to(flow::kInt64).tolist<int64_t>();
  const std::vector<float> sources = src.contiguous().tolist<float>();
  const Shape& shape = index.shape();
  const flow::Strides out_strides = flow::contiguous_strides(input.shape()), src_strides = flow::contiguous_strides(src.shape());
  for (int64_t k = 0; k < index.numel(); ++k) {
    int64_t rest = k, out_at = 0, src_at = 0;
    for (int64_t d = shape.ndim() - 1; d >= 0; --d) {
      const int64_t position = rest % shape[d];
      rest /= shape[d];
      const int64_t entry = entries[static_cast<size_t>(k)];
      out_at += (d == dim ? (entry < 0 ? entry + input.size(dim) : entry) : position) * out_strides[static_cast<size_t>(d)];
      src_at += position * src_strides[static_cast<size_t>(d)];
    }
    float& target = out[static_cast<size_t>(out_at)];
    target = add ? target + sources[static_cast<size_t>(src_at)] : sources[static_cast<size_t>(src_at)];
  }
  return out;
}

}  // namespace

// The kernel copies a run of the index's last dim as one block when its entries are all equal (a
// KV cache write: a position per row expanded over head_dim) and goes element by element
// otherwise; both must give the definition's result along every dim, for input, index and src
// as the kernel reads them, through their strides, with repeated targets written in order.
TEST(Index, ScatterAlongEachDimMatchesItsDefinition) {
  flow::manual_seed(11);
  const Shape shape{4, 5, 6};
  const Tensor input = flow::randn({6, 4, 5}).permute({1, 2, 0});
  ASSERT_FALSE(input.is_contiguous());
  for (int64_t dim = 0; dim < 3; ++dim) {
    const int64_t size = shape[dim];
    // Runs of one entry: an index expanded along the last dim (of size 1 along it, then widened).
    Shape narrow{3, 4, 6};
    narrow[static_cast<size_t>(dim)] = 3;
    Shape one_per_run = narrow;
    one_per_run[2] = 1;
    const Tensor expanded = flow::randint(-size, size, one_per_run).expand(narrow);
    // Any entries, repeats included (int32 this time).
    const Tensor scattered = flow::randint(0, size, narrow).to(flow::kInt32);
    // Any entries through a permuted view.
    const Tensor permuted = flow::randint(0, size, {narrow[2], narrow[1], narrow[0]}).permute({2, 1, 0});
    // A src larger than the index, read through a permuted view.
    const Tensor src = flow::randn({6, 5, 4}).permute({2, 1, 0});
    for (const Tensor& index : {expanded, scattered, permuted}) {
      for (bool add : {false, true}) {
        const Tensor got = add ? flow::scatter_add(input, dim, index, src) : flow::scatter(input, dim, index, src);
        EXPECT_EQ(got.tolist<float>(), scatter_by_definition(input, dim, index, src, add)) << "dim " << dim << " add " << add;
      }
      Tensor written = input.clone();
      flow::scatter_(written, dim, index, src);
      EXPECT_EQ(written.tolist<float>(), scatter_by_definition(input, dim, index, src, false)) << "scatter_ along dim " << dim;
    }
  }
  // Two whole runs naming one row: the later one wins, or both add up.
  const Tensor base = flow::zeros({3, 4});
  const Tensor both_at_row_1 = flow::full({2, 1}, 1, flow::TensorOptions(flow::kInt64)).expand({2, 4});
  const Tensor rows = flow::arange(1, 9, 1, flow::TensorOptions(flow::kFloat32)).reshape({2, 4});
  EXPECT_EQ(flow::scatter(base, 0, both_at_row_1, rows).tolist<float>(), (std::vector<float>{0, 0, 0, 0, 5, 6, 7, 8, 0, 0, 0, 0}));
  EXPECT_EQ(flow::scatter_add(base, 0, both_at_row_1, rows).tolist<float>(), (std::vector<float>{0, 0, 0, 0, 6, 8, 10, 12, 0, 0, 0, 0}));
  // A run's index is checked once for the whole block.
  EXPECT_THROW_MSG(flow::scatter(base, 0, flow::full({1, 4}, 3, flow::TensorOptions(flow::kInt64)), rows),
                   "[scatter] index 3 is out of bounds for dimension 0 with size 3");
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
