#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/reference.h"
#include "common/test_util.h"

using flow::Shape;
using flow::Tensor;
using flow::testing::expect_close;
using flow::testing::values;

namespace {
// Reference reduction over dims (sorted), folding with f from init, then finishing with fin(acc, count).
Tensor reference_reduce(const Tensor& x, std::vector<int64_t> dims, bool keepdim, double init,
                        const std::function<double(double, double)>& f,
                        const std::function<double(double, int64_t)>& fin = [](double a, int64_t) { return a; }) {
  if (dims.empty()) {
    for (int64_t d = 0; d < x.dim(); ++d) dims.push_back(d);
  }
  for (auto& d : dims) d = d < 0 ? d + x.dim() : d;
  Shape out_keep;
  for (int64_t d = 0; d < x.dim(); ++d) {
    out_keep.push_back(std::find(dims.begin(), dims.end(), d) != dims.end() ? 1 : x.size(d));
  }
  const auto v = values(x);
  std::vector<double> acc(static_cast<size_t>(out_keep.numel()), init);
  std::vector<int64_t> counts(acc.size(), 0);
  const flow::Strides out_strides = flow::contiguous_strides(out_keep);
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t rest = i, o = 0;
    for (int64_t d = x.dim() - 1; d >= 0; --d) {
      const int64_t idx = rest % x.size(d);
      rest /= x.size(d);
      if (out_keep[d] != 1 || x.size(d) == 1) o += (out_keep[d] == 1 ? 0 : idx) * out_strides[d];
    }
    acc[o] = f(acc[o], v[i]);
    ++counts[o];
  }
  for (size_t o = 0; o < acc.size(); ++o) acc[o] = fin(acc[o], counts[o]);
  Shape out;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) out.push_back(x.size(d));
    else if (keepdim) out.push_back(1);
  }
  return flow::tensor(acc, out);
}

std::vector<std::pair<Shape, std::vector<int64_t>>> reduce_cases() {
  return {{{10}, {}},       {{3, 4}, {0}},      {{3, 4}, {1}},       {{3, 4}, {-1, 0}},  {{2, 3, 4}, {1}},
          {{2, 3, 4}, {0, 2}}, {{5, 1, 7}, {1}},  {{0, 3}, {1}},       {{2, 0}, {1}},     {{300000}, {}},
          {{4, 70000}, {1}},   {{70000, 3}, {0}}, {{2, 50, 3000}, {0, 2}}};
}
}  // namespace

TEST(Reduce, SumProdMeanMatchReference) {
  flow::manual_seed(2);
  for (flow::DType dtype : {flow::kFloat32, flow::kFloat64}) {
    for (const auto& [shape, dims] : reduce_cases()) {
      for (bool keepdim : {false, true}) {
        SCOPED_TRACE(shape.str() + " dims " + Shape(dims).str() + (keepdim ? " keepdim" : ""));
        Tensor x = flow::rand(shape, dtype) + 0.5;
        const double tol = dtype == flow::kFloat32 ? 1e-5 : 1e-12;
        expect_close(flow::sum(x, dims, keepdim), reference_reduce(x, dims, keepdim, 0, std::plus<double>()), tol, 1e-5);
        if (x.numel() < 100) {
          expect_close(flow::prod(x, dims, keepdim), reference_reduce(x, dims, keepdim, 1, std::multiplies<double>()), tol, 1e-6);
        }
        expect_close(flow::mean(x, dims, keepdim),
                     reference_reduce(x, dims, keepdim, 0, std::plus<double>(),
                                      [](double a, int64_t n) { return n ? a / n : NAN; }),
                     tol, 1e-6);
      }
    }
  }
}

TEST(Reduce, MaxMinOverDimsAndNonContiguous) {
  flow::manual_seed(3);
  Tensor x = flow::randn({6, 5, 4}).permute({2, 0, 1});
  auto max_ref = [](double a, double b) { return std::max(a, b); };
  expect_close(flow::max(x), reference_reduce(x, {}, false, -INFINITY, max_ref));
  expect_close(flow::min(x), reference_reduce(x, {}, false, INFINITY, [](double a, double b) { return std::min(a, b); }));
  auto [values_, indices] = flow::max(x, 1, false);
  expect_close(values_, reference_reduce(x, {1}, false, -INFINITY, max_ref));
  EXPECT_EQ(indices.dtype(), flow::kInt64);
  expect_close(flow::gather(x, 1, indices.unsqueeze(1)).squeeze(1), values_);
  EXPECT_TRUE(flow::allclose(flow::argmax(x, 1), indices));
  auto [min_values, min_indices] = flow::min(x, -1, true);
  EXPECT_EQ(min_values.shape(), (Shape{4, 6, 1}));
  EXPECT_TRUE(flow::allclose(flow::argmin(x, -1, true), min_indices));
}

TEST(Reduce, ArgmaxTiesAndNan) {
  auto x = flow::tensor<float>({1, 3, 3, 2});
  EXPECT_EQ(flow::argmax(x).item<int64_t>(), 1);
  EXPECT_EQ(flow::argmin(x).item<int64_t>(), 0);
  auto n = flow::tensor<float>({1, NAN, 5});
  EXPECT_TRUE(std::isnan(flow::max(n).item<float>()));
  EXPECT_EQ(flow::argmax(n).item<int64_t>(), 1);
  auto m = flow::arange(12).reshape({3, 4});
  EXPECT_EQ(flow::argmax(m).item<int64_t>(), 11);
  EXPECT_EQ(flow::argmax(m, 0).tolist<int64_t>(), (std::vector<int64_t>{2, 2, 2, 2}));
}

TEST(Reduce, IntegerSumsGiveInt64) {
  auto i = flow::tensor<int32_t>({1, 2, 3, 4}, Shape{2, 2});
  EXPECT_EQ(flow::sum(i).dtype(), flow::kInt64);
  EXPECT_EQ(flow::sum(i, {0}).tolist<int64_t>(), (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(flow::prod(i).item<int64_t>(), 24);
  EXPECT_EQ(flow::sum(flow::tensor<bool>({true, true, false})).item<int64_t>(), 2);
  EXPECT_EQ(flow::max(i).item<int32_t>(), 4);
  EXPECT_TRUE(flow::all(flow::ones({3})));
  EXPECT_FALSE(flow::all(flow::tensor<int64_t>({1, 0})));
  EXPECT_TRUE(flow::any(flow::tensor<int64_t>({0, 2})));
}

TEST(Reduce, VarStdLogsumexp) {
  flow::manual_seed(4);
  Tensor x = flow::randn({5, 7}, flow::kFloat64) * 3 + 1;
  for (int64_t correction : {0, 1}) {
    Tensor mean = reference_reduce(x, {1}, true, 0, std::plus<double>(), [](double a, int64_t n) { return a / n; });
    Tensor centered = x - mean;
    Tensor expected = reference_reduce(centered * centered, {1}, false, 0, std::plus<double>(),
                                       [correction](double a, int64_t n) { return a / (n - correction); });
    expect_close(flow::var(x, {1}, correction), expected, 1e-12);
    expect_close(flow::std(x, {1}, correction), flow::sqrt(expected), 1e-12);
  }
  Tensor big = flow::tensor<double>({1000, 1000, -INFINITY});
  EXPECT_NEAR(flow::logsumexp(big, {0}).item<double>(), 1000 + std::log(2.0), 1e-9);
  expect_close(flow::logsumexp(x, {0}, true),
               flow::log(reference_reduce(flow::exp(x), {0}, true, 0, std::plus<double>())), 1e-12);
}

TEST(Reduce, EmptyReductions) {
  EXPECT_EQ(flow::sum(flow::zeros({0})).item<float>(), 0.f);
  EXPECT_EQ(flow::prod(flow::zeros({0})).item<float>(), 1.f);
  EXPECT_TRUE(std::isnan(flow::mean(flow::zeros({0})).item<float>()));
  EXPECT_EQ(flow::sum(flow::zeros({2, 0}), {1}).tolist<float>(), (std::vector<float>{0, 0}));
}

TEST(Reduce, FullSumIsIdenticalForAnyThreadCount) {
  flow::manual_seed(5);
  Tensor x = flow::randn({3000001});
  const int threads = flow::get_num_threads();
  flow::set_num_threads(1);
  const float one = flow::sum(x).item<float>();
  const auto rows_one = flow::sum(x.narrow(0, 0, 3000000).reshape({3, 1000000}), {1}).tolist<float>();
  flow::set_num_threads(std::max(2, threads));
  EXPECT_EQ(flow::sum(x).item<float>(), one);
  EXPECT_EQ(flow::sum(x.narrow(0, 0, 3000000).reshape({3, 1000000}), {1}).tolist<float>(), rows_one);
  flow::set_num_threads(threads);
}

TEST(Reduce, Errors) {
  EXPECT_THROW_MSG(flow::mean(flow::arange(4)), "[mean] expected a floating point input, got int64");
  EXPECT_THROW_MSG(flow::sum(flow::zeros({2}), {1}), "[sum] dim 1 out of range");
  EXPECT_THROW_MSG(flow::sum(flow::zeros({2, 2}), {0, -2}), "[sum] dim -2 appears multiple times");
  EXPECT_THROW_MSG(flow::max(flow::zeros({0})), "[max] cannot reduce over dimension 0 of size 0");
  EXPECT_THROW_MSG(flow::argmax(flow::zeros({2, 0}), 1), "[argmax] cannot reduce over dimension 1 of size 0");
}
