#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/test_util.h"
#include "core/flow.h"

namespace {
double mean_of(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / v.size(); }
double var_of(const std::vector<double>& v) {
  const double m = mean_of(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / v.size();
}
}  // namespace

TEST(Random, ManualSeedReproduces) {
  flow::manual_seed(42);
  auto a = flow::rand({100}).tolist<float>();
  auto b = flow::randn({7, 3}).tolist<float>();
  flow::manual_seed(42);
  EXPECT_EQ(flow::rand({100}).tolist<float>(), a);
  EXPECT_EQ(flow::randn({7, 3}).tolist<float>(), b);
  EXPECT_NE(flow::rand({100}).tolist<float>(), a) << "successive draws must differ";
}

TEST(Random, IndependentOfThreadCount) {
  const int threads = flow::get_num_threads();
  flow::set_num_threads(1);
  flow::manual_seed(7);
  auto one = flow::randn({300000}).tolist<float>();
  auto perm_one = flow::randperm(1000).tolist<int64_t>();
  flow::set_num_threads(std::max(2, threads));
  flow::manual_seed(7);
  EXPECT_EQ(flow::randn({300000}).tolist<float>(), one);
  EXPECT_EQ(flow::randperm(1000).tolist<int64_t>(), perm_one);
  flow::set_num_threads(threads);
}

TEST(Random, Distributions) {
  flow::manual_seed(1);
  auto u = flow::rand({200000}, flow::kFloat64).tolist<double>();
  EXPECT_GE(*std::min_element(u.begin(), u.end()), 0.0);
  EXPECT_LT(*std::max_element(u.begin(), u.end()), 1.0);
  EXPECT_NEAR(mean_of(u), 0.5, 0.005);
  EXPECT_NEAR(var_of(u), 1.0 / 12, 0.002);
  auto n = flow::randn({200000}, flow::kFloat64).tolist<double>();
  EXPECT_NEAR(mean_of(n), 0.0, 0.01);
  EXPECT_NEAR(var_of(n), 1.0, 0.02);
  auto r = flow::randint(-3, 4, {100000}).tolist<int64_t>();
  EXPECT_EQ(*std::min_element(r.begin(), r.end()), -3);
  EXPECT_EQ(*std::max_element(r.begin(), r.end()), 3);
}

TEST(Random, RandpermIsAPermutation) {
  flow::manual_seed(3);
  auto p = flow::randperm(1000).tolist<int64_t>();
  auto sorted = p;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> expected(1000);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(sorted, expected);
  EXPECT_NE(p, expected);
  EXPECT_EQ(flow::randperm(0).numel(), 0);
}
