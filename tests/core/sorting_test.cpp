#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/reference.h"
#include "common/test_util.h"
#include "core/op.h"

using flow::Shape;
using flow::Tensor;

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Stable sort of every line along dim in float64: {values, indices}.
std::pair<std::vector<double>, std::vector<int64_t>> reference_sort(const Tensor& x, int64_t dim, bool descending) {
  const std::vector<double> v = flow::testing::values(x);
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  const int64_t n = x.size(dim);
  std::vector<double> values(v.size());
  std::vector<int64_t> indices(v.size());
  for (int64_t start = 0; start < static_cast<int64_t>(v.size()); ++start) {
    if (start / inner % n != 0) continue;  // not the first element of a line
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      const double x = v[start + a * inner], y = v[start + b * inner];
      return descending ? x > y : x < y;
    });
    for (int64_t j = 0; j < n; ++j) {
      values[start + j * inner] = v[start + order[j] * inner];
      indices[start + j * inner] = order[j];
    }
  }
  return {values, indices};
}
}  // namespace

TEST(Sort, HandComputed) {
  const Tensor x = flow::tensor<float>({3, 1, 2, 0, 5, 4}, Shape{2, 3});
  auto [values, indices] = flow::sort(x);
  EXPECT_EQ(values.tolist<float>(), (std::vector<float>{1, 2, 3, 0, 4, 5}));
  EXPECT_EQ(indices.dtype(), flow::kInt64);
  EXPECT_EQ(indices.tolist<int64_t>(), (std::vector<int64_t>{1, 2, 0, 0, 2, 1}));
  auto down = flow::sort(x, 0, /*descending=*/true);
  EXPECT_EQ(down.values.tolist<float>(), (std::vector<float>{3, 5, 4, 0, 1, 2}));
  EXPECT_EQ(down.indices.tolist<int64_t>(), (std::vector<int64_t>{0, 1, 1, 1, 0, 0}));
  EXPECT_EQ(flow::argsort(x, 1, true).tolist<int64_t>(), (std::vector<int64_t>{0, 2, 1, 1, 2, 0}));
}

TEST(Sort, NaNIsLargestAndTiesKeepInputOrder) {
  const Tensor x = flow::tensor<double>({3, kNaN, 1, kNaN, 2}, Shape{5});
  auto up = flow::sort(x);
  EXPECT_EQ(up.indices.tolist<int64_t>(), (std::vector<int64_t>{2, 4, 0, 1, 3}));
  const std::vector<double> up_values = up.values.tolist<double>();
  EXPECT_EQ(std::vector<double>(up_values.begin(), up_values.begin() + 3), (std::vector<double>{1, 2, 3}));
  EXPECT_TRUE(std::isnan(up_values[3]) && std::isnan(up_values[4]));
  EXPECT_EQ(flow::argsort(x, -1, /*descending=*/true).tolist<int64_t>(), (std::vector<int64_t>{1, 3, 0, 4, 2}));
  const Tensor ties = flow::tensor<int64_t>({2, 1, 2, 1, 2}, Shape{5});
  EXPECT_EQ(flow::argsort(ties, 0, false, /*stable=*/true).tolist<int64_t>(), (std::vector<int64_t>{1, 3, 0, 2, 4}));
  EXPECT_EQ(flow::argsort(ties, 0, true, /*stable=*/true).tolist<int64_t>(), (std::vector<int64_t>{0, 2, 4, 1, 3}));
  EXPECT_EQ(flow::sort(ties, 0, true).values.dtype(), flow::kInt64);
}

TEST(Sort, MatchesReferenceAlongEveryDimAndOnViews) {
  flow::manual_seed(51);
  for (flow::DType dtype : {flow::kFloat32, flow::kFloat64, flow::kInt64}) {
    // {300, 200}: lines enough for several parallel_for chunks along either dim.
    for (const Shape& shape : std::vector<Shape>{{7}, {3, 5, 4}, {300, 200}}) {
      // Integers from a small range, so that ties are common.
      const Tensor x = dtype == flow::kInt64 ? flow::randint(-5, 5, shape) : flow::randn(shape, dtype);
      for (int64_t dim = 0; dim < x.dim(); ++dim) {
        for (bool descending : {false, true}) {
          SCOPED_TRACE(shape.str() + " dim " + std::to_string(dim) + " " + flow::dtype_name(dtype) + (descending ? " down" : " up"));
          auto [values, indices] = flow::sort(x, dim, descending);
          const auto expected = reference_sort(x, dim, descending);
          EXPECT_EQ(flow::testing::values(values), expected.first);
          EXPECT_EQ(indices.tolist<int64_t>(), expected.second);
        }
      }
    }
  }
  const Tensor view = flow::randn({4, 6}).t();
  EXPECT_EQ(flow::argsort(view, 1).tolist<int64_t>(), reference_sort(view, 1, false).second);
}

TEST(Sort, ScalarAndEmpty) {
  auto [value, index] = flow::sort(flow::scalar_tensor(2.5));
  EXPECT_EQ(value.shape(), Shape{});
  EXPECT_EQ(value.item<float>(), 2.5f);
  EXPECT_EQ(index.item<int64_t>(), 0);
  auto empty = flow::sort(flow::zeros({2, 0, 3}), 1);
  EXPECT_EQ(empty.values.shape(), (Shape{2, 0, 3}));
  EXPECT_EQ(empty.indices.shape(), (Shape{2, 0, 3}));
}

TEST(Topk, HandComputed) {
  const Tensor x = flow::tensor<float>({1, 5, 3, 5, 2, 8, 0, 4}, Shape{2, 4});
  auto [values, indices] = flow::topk(x, 2);
  EXPECT_EQ(values.shape(), (Shape{2, 2}));
  EXPECT_EQ(values.tolist<float>(), (std::vector<float>{5, 5, 8, 4}));
  EXPECT_EQ(indices.tolist<int64_t>(), (std::vector<int64_t>{1, 3, 1, 3}));  // the tie: first in the input first
  auto smallest = flow::topk(x, 1, 0, /*largest=*/false);
  EXPECT_EQ(smallest.values.tolist<float>(), (std::vector<float>{1, 5, 0, 4}));
  EXPECT_EQ(smallest.indices.tolist<int64_t>(), (std::vector<int64_t>{0, 0, 1, 1}));
  EXPECT_EQ(flow::topk(x, 0).values.shape(), (Shape{2, 0}));
  const Tensor with_nan = flow::tensor<double>({1, kNaN, 3}, Shape{3});
  EXPECT_EQ(flow::topk(with_nan, 2).indices.tolist<int64_t>(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(flow::topk(with_nan, 2, 0, false).indices.tolist<int64_t>(), (std::vector<int64_t>{0, 2}));
  auto scalar = flow::topk(flow::scalar_tensor(4.0), 1);
  EXPECT_EQ(scalar.values.shape(), Shape{});
  EXPECT_EQ(scalar.indices.item<int64_t>(), 0);
  // PyTorch gives a 0-d input back (and index 0) for k = 0 too: the result has no room for none.
  for (int64_t k : {0, 1}) {
    auto kept = flow::topk(flow::scalar_tensor(-7.5), k);
    EXPECT_EQ(kept.values.item<double>(), -7.5) << k;
    EXPECT_EQ(kept.indices.item<int64_t>(), 0) << k;
  }
}

TEST(Topk, IsThePrefixOfSortAndUnsortedChoosesTheSameSet) {
  flow::manual_seed(52);
  for (flow::DType dtype : {flow::kFloat32, flow::kFloat64, flow::kInt64}) {
    const Tensor x = dtype == flow::kInt64 ? flow::randperm(60).reshape({3, 4, 5}) : flow::randn({3, 4, 5}, dtype);
    for (int64_t dim = 0; dim < 3; ++dim) {
      for (bool largest : {true, false}) {
        for (int64_t k : {int64_t{1}, x.size(dim) - 1, x.size(dim)}) {
          SCOPED_TRACE(std::string(flow::dtype_name(dtype)) + " dim " + std::to_string(dim) + " k " + std::to_string(k));
          auto top = flow::topk(x, k, dim, largest);
          auto sorted = flow::sort(x, dim, largest);
          EXPECT_EQ(top.indices.tolist<int64_t>(), sorted.indices.narrow(dim, 0, k).contiguous().tolist<int64_t>());
          EXPECT_EQ(flow::testing::values(top.values), flow::testing::values(sorted.values.narrow(dim, 0, k)));
          // Unsorted: the same elements, in some order.
          auto loose = flow::topk(x, k, dim, largest, /*sorted=*/false);
          EXPECT_EQ(flow::sort(loose.indices, dim).values.tolist<int64_t>(), flow::sort(top.indices, dim).values.tolist<int64_t>());
          EXPECT_EQ(flow::testing::values(flow::gather(x, dim, loose.indices)), flow::testing::values(loose.values));
        }
      }
    }
  }
}

TEST(Sorting, SbpSplitsTheOtherDims) {
  const auto signatures = flow::find_op("topk").sbp({{Shape{2, 3, 4}, flow::kFloat32, flow::kCPU}},
                                                    flow::Attrs().set("k", 2).set("dim", 1).set("largest", true).set("sorted", true));
  std::vector<std::string> described;
  for (const auto& s : signatures) described.push_back(s.inputs[0].str() + "->" + s.outputs[0].str() + "," + s.outputs[1].str());
  EXPECT_EQ(described, (std::vector<std::string>{"S(0)->S(0),S(0)", "S(2)->S(2),S(2)", "B->B,B"}));
}

TEST(Sorting, Errors) {
  EXPECT_THROW_MSG(flow::sort(flow::zeros({2, 3}), 2), "[sort] dim 2 out of range for a tensor of 2 dimensions");
  EXPECT_THROW_MSG(flow::argsort(flow::zeros({2, 3}), -3), "[sort] dim -3 out of range");
  EXPECT_THROW_MSG(flow::topk(flow::zeros({2, 3}), 4), "[topk] selected index k out of range: k 4 for dimension 1 of size 3");
  EXPECT_THROW_MSG(flow::topk(flow::zeros({2, 3}), -1, 0), "[topk] selected index k out of range: k -1 for dimension 0 of size 2");
  EXPECT_THROW_MSG(flow::topk(flow::scalar_tensor(1.0), 2), "[topk] selected index k out of range");
  EXPECT_THROW_MSG(flow::topk(flow::zeros({2}), 1, 1), "[topk] dim 1 out of range");
}

namespace {
// How often each category occurs among the samples.
std::vector<double> frequencies(const Tensor& samples, int64_t categories) {
  std::vector<double> counts(static_cast<size_t>(categories));
  const std::vector<int64_t> drawn = samples.contiguous().tolist<int64_t>();
  for (int64_t c : drawn) counts.at(static_cast<size_t>(c)) += 1.0 / static_cast<double>(drawn.size());
  return counts;
}

void expect_frequencies(const std::vector<double>& got, const std::vector<double>& expected, double tolerance) {
  ASSERT_EQ(got.size(), expected.size());
  for (size_t c = 0; c < got.size(); ++c) EXPECT_NEAR(got[c], expected[c], tolerance) << "category " << c;
}
}  // namespace

// Tolerances are about 5 standard deviations of the frequencies at these sample counts.
TEST(Multinomial, WithReplacementFollowsTheWeights) {
  flow::manual_seed(61);
  const Tensor weights = flow::tensor<float>({1, 2, 0, 3, 4}, Shape{5});  // unnormalized, one zero
  const Tensor samples = flow::multinomial(weights, 200000, /*replacement=*/true);
  EXPECT_EQ(samples.dtype(), flow::kInt64);
  EXPECT_EQ(samples.shape(), Shape{200000});
  expect_frequencies(frequencies(samples, 5), {0.1, 0.2, 0.0, 0.3, 0.4}, 0.005);
  // Rows draw from their own weights.
  const Tensor rows = flow::multinomial(flow::tensor<double>({1, 0, 0, 0, 1, 3}, Shape{2, 3}), 40000, true);
  EXPECT_EQ(rows.shape(), (Shape{2, 40000}));
  expect_frequencies(frequencies(rows.select(0, 0), 3), {1, 0, 0}, 1e-9);  // only category 0
  expect_frequencies(frequencies(rows.select(0, 1), 3), {0, 0.25, 0.75}, 0.011);
}

TEST(Multinomial, WithoutReplacementDrawsOneAtATimeFromTheRest) {
  flow::manual_seed(62);
  const int64_t rows = 50000;
  const Tensor weights = flow::tensor<double>({1, 2, 3, 4}, Shape{1, 4}).expand({rows, 4}).contiguous();
  const Tensor samples = flow::multinomial(weights, 4);
  // Every row is a permutation.
  const Tensor sorted = flow::sort(samples, 1).values;
  EXPECT_EQ(flow::testing::values(sorted), flow::testing::values(flow::arange(4).reshape({1, 4}).expand({rows, 4})));
  // The first draw follows the weights; the second the remaining ones:
  // P(second = c) = sum over first = f != c of p_f * p_c / (1 - p_f).
  const std::vector<double> p{0.1, 0.2, 0.3, 0.4};
  std::vector<double> second(4);
  for (size_t c = 0; c < 4; ++c) {
    for (size_t f = 0; f < 4; ++f) second[c] += f == c ? 0 : p[f] * p[c] / (1 - p[f]);
  }
  expect_frequencies(frequencies(samples.select(1, 0), 4), p, 0.011);
  expect_frequencies(frequencies(samples.select(1, 1), 4), second, 0.011);
  // Zero weights are drawn only once the positive ones are used up (as in PyTorch).
  const Tensor sparse = flow::multinomial(flow::tensor<float>({0, 5, 0, 1}, Shape{4}), 2);
  EXPECT_EQ(flow::sort(sparse).values.tolist<int64_t>(), (std::vector<int64_t>{1, 3}));
}

TEST(Multinomial, ReproducibleFromTheSeed) {
  const Tensor weights = flow::rand({3, 20}, flow::kFloat64) + 0.01;
  for (bool replacement : {false, true}) {
    flow::manual_seed(7);
    const Tensor first = flow::multinomial(weights, 10, replacement);
    const Tensor next = flow::multinomial(weights, 10, replacement);
    flow::manual_seed(7);
    EXPECT_EQ(flow::multinomial(weights, 10, replacement).tolist<int64_t>(), first.tolist<int64_t>());
    EXPECT_NE(next.tolist<int64_t>(), first.tolist<int64_t>());  // later calls draw fresh counters
  }
}

TEST(Multinomial, OwnGeneratorLeavesTheDefaultAlone) {
  const Tensor weights = flow::rand({2, 30}, flow::kFloat64) + 0.01;
  flow::Generator a(11), b(11);
  const uint64_t default_offset = flow::default_generator().offset();
  const Tensor first = flow::multinomial(weights, 5, false, &a);
  EXPECT_EQ(flow::multinomial(weights, 5, false, &b).tolist<int64_t>(), first.tolist<int64_t>());
  EXPECT_NE(flow::multinomial(weights, 5, false, &a).tolist<int64_t>(), first.tolist<int64_t>());
  EXPECT_EQ(flow::default_generator().offset(), default_offset);
}

TEST(Multinomial, Errors) {
  const Tensor w = flow::ones({2, 3});
  EXPECT_THROW_MSG(flow::multinomial(flow::ones({2, 2, 2}), 1), "[multinomial] prob_dist must be 1 or 2 dim, got 3");
  EXPECT_THROW_MSG(flow::multinomial(flow::ones({3}, flow::kInt64), 1), "[multinomial] only supports floating-point dtypes for input, got int64");
  EXPECT_THROW_MSG(flow::multinomial(w, 0), "[multinomial] cannot sample n_sample <= 0 samples");
  EXPECT_THROW_MSG(flow::multinomial(w, 4), "[multinomial] cannot sample n_sample > prob_dist.size(-1) samples without replacement (4 > 3)");
  EXPECT_NO_THROW(flow::multinomial(w, 4, true));
  const auto with = [](std::vector<float> v) { return flow::tensor<float>(v, Shape{static_cast<int64_t>(v.size())}); };
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const Tensor& bad : {with({1, -1}), with({1, inf}), with({nan, 1})}) {
    EXPECT_THROW_MSG(flow::multinomial(bad, 1), "[multinomial] probability tensor contains either `inf`, `nan` or element < 0");
  }
  EXPECT_THROW_MSG(flow::multinomial(flow::tensor<float>({1, 1, 0, 0}, Shape{2, 2}), 1), "[multinomial] invalid multinomial distribution (sum of probabilities <= 0)");
  // Many draws with replacement check entry by entry, as PyTorch's kernel for them does.
  EXPECT_THROW_MSG(flow::multinomial(with({1, -1}), 2, true), "[multinomial] invalid multinomial distribution (encountering probability entry < 0)");
  EXPECT_THROW_MSG(flow::multinomial(with({nan, 1}), 2, true), "[multinomial] invalid multinomial distribution (encountering probability entry < 0)");
  EXPECT_THROW_MSG(flow::multinomial(with({1, inf}), 2, true), "[multinomial] invalid multinomial distribution (encountering probability entry = infinity or NaN)");
  EXPECT_THROW_MSG(flow::multinomial(with({0, 0}), 2, true), "[multinomial] invalid multinomial distribution (sum of probabilities <= 0)");
}
