// flow's product on packed weights (core/kernels/cpu/linear_packed.h, oneflow_lite's linears of
// 2-32 rows) against a float64 loop: every row tile (1-6 rows), partial panels of output
// features, K in several slices, rows of x further apart than K, ReLU keeping NaN, bias or none,
// and the panels split over threads.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/kernels/cpu/linear_packed.h"
#include "core/thread_pool.h"

using flow::cpu::PackedLinear;

namespace {

class PackedLinearTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!PackedLinear::available()) GTEST_SKIP() << "built without AVX2";
  }

  std::vector<float> random_values(size_t count) {
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    std::vector<float> v(count);
    for (float& e : v) e = dist(gen_);
    return v;
  }

  // x (rows, k) with rows x_stride apart, against relu?(x @ W^T + bias) in float64.
  void expect_matches(int64_t rows, int64_t k, int64_t n, int64_t x_stride, bool with_bias, bool relu, const std::vector<size_t>& nan_at = {}) {
    SCOPED_TRACE(::testing::Message() << rows << "x" << k << " @ " << k << "x" << n << " stride " << x_stride << (with_bias ? " bias" : "")
                                      << (relu ? " relu" : ""));
    std::vector<float> x = random_values(static_cast<size_t>(rows * x_stride));
    for (size_t i : nan_at) x[i] = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> w = random_values(static_cast<size_t>(n * k)), bias = random_values(static_cast<size_t>(n));
    const PackedLinear linear(k, n, w.data(), with_bias ? bias.data() : nullptr);
    // Guards past the end of y: a store beyond out_features shows.
    std::vector<float> y(static_cast<size_t>(rows * n + 8), 7.f);
    linear.run(x.data(), rows, x_stride, y.data(), relu);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < n; ++j) {
        double want = with_bias ? bias[static_cast<size_t>(j)] : 0.0;
        for (int64_t i = 0; i < k; ++i) want += double{x[static_cast<size_t>(r * x_stride + i)]} * w[static_cast<size_t>(j * k + i)];
        if (relu && want < 0) want = 0;
        const float got = y[static_cast<size_t>(r * n + j)];
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(got)) << "at " << r << ", " << j;
        } else {
          ASSERT_NEAR(got, want, 2e-6 * static_cast<double>(k)) << "at " << r << ", " << j;
        }
      }
    }
    for (size_t i = static_cast<size_t>(rows * n); i < y.size(); ++i) EXPECT_EQ(y[i], 7.f) << "past the end, " << i;
  }

  std::mt19937 gen_{11};
};

}  // namespace

TEST_F(PackedLinearTest, EveryRowTileAndPartialPanels) {
  for (int64_t rows : {1, 2, 3, 4, 5, 6, 7, 8, 11, 13, 64}) expect_matches(rows, 40, 24, 40, true, false);
  for (int64_t n : {1, 8, 10, 16, 17, 33}) expect_matches(7, 19, n, 19, false, false);
}

TEST_F(PackedLinearTest, SlicesOfKAndStridedRows) {
  expect_matches(8, 784, 40, 784, true, false);  // 4 slices of 196
  expect_matches(5, 600, 16, 610, true, false);  // 3 slices of 200, rows 610 apart
  expect_matches(3, 257, 10, 300, false, true);
}

TEST_F(PackedLinearTest, ReluKeepsNan) { expect_matches(6, 300, 20, 300, true, true, {2 * 300 + 5}); }

TEST_F(PackedLinearTest, PanelsSplitOverThreads) {
  const int threads = flow::get_num_threads();
  flow::set_num_threads(2);
  expect_matches(9, 64, 72, 64, true, true);
  flow::set_num_threads(threads);
}
