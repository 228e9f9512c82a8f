// The fused first-layer convolution + ReLU + 2x2 max pooling of oneflow_lite on AVX-512
// (core/kernels/cpu/conv_shallow_pool.h) against float64 loops: every output-channel count it
// takes, 1-4 input channels, odd convolution sizes (the last row and column dropped), bias or
// none, ReLU or none, NaN and -inf, one and two threads, and the shapes it refuses. Skipped on
// CPUs without AVX-512.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/kernels/cpu/conv_shallow_pool.h"
#include "core/thread_pool.h"

using flow::cpu::ShallowConvPool;
using flow::cpu::ShallowConvPoolShape;

namespace {

// max_pool2d(relu?(conv(x, w) + b), 2) in float64, NHWC.
std::vector<double> reference(const ShallowConvPoolShape& s, const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
                              bool relu) {
  const int64_t oh = s.height - s.kernel_h + 1, ow = s.width - s.kernel_w + 1, ph = oh / 2, pw = ow / 2;
  std::vector<double> y;
  for (int64_t n = 0; n < s.batch; ++n) {
    for (int64_t i = 0; i < ph; ++i) {
      for (int64_t j = 0; j < pw; ++j) {
        for (int64_t o = 0; o < s.out_channels; ++o) {
          double best = -std::numeric_limits<double>::infinity();
          bool nan = false;
          for (int64_t p = 0; p < 4; ++p) {
            const int64_t r = 2 * i + p / 2, c = 2 * j + p % 2;
            double sum = b.empty() ? 0 : b[o];
            for (int64_t ci = 0; ci < s.in_channels; ++ci) {
              for (int64_t kh = 0; kh < s.kernel_h; ++kh) {
                for (int64_t kw = 0; kw < s.kernel_w; ++kw) {
                  sum += double(x[((n * s.in_channels + ci) * s.height + r + kh) * s.width + c + kw]) *
                         w[((o * s.in_channels + ci) * s.kernel_h + kh) * s.kernel_w + kw];
                }
              }
            }
            if (relu && sum < 0) sum = 0;
            nan = nan || std::isnan(sum);
            best = std::max(best, sum);
          }
          y.push_back(nan ? std::numeric_limits<double>::quiet_NaN() : best);
        }
      }
    }
  }
  return y;
}

std::vector<float> random_values(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& value : v) value = dist(rng);
  return v;
}

void expect_matches(const ShallowConvPoolShape& s, std::vector<float> x, bool bias, bool relu, std::mt19937& rng) {
  SCOPED_TRACE(::testing::Message() << "batch " << s.batch << ", " << s.in_channels << " -> " << s.out_channels << " channels, " << s.height
                                    << "x" << s.width << " image, " << s.kernel_h << "x" << s.kernel_w << " kernel, bias " << bias << ", relu "
                                    << relu);
  const std::vector<float> w = random_values(static_cast<size_t>(s.out_channels * s.in_channels * s.kernel_h * s.kernel_w), rng);
  const std::vector<float> b = bias ? random_values(static_cast<size_t>(s.out_channels), rng) : std::vector<float>();
  ShallowConvPool conv(s, w.data(), bias ? b.data() : nullptr);
  const std::vector<double> expected = reference(s, x, w, b, relu);
  std::vector<float> y(expected.size(), 12345.f);
  ASSERT_EQ(static_cast<int64_t>(y.size()), s.batch * conv.pooled_height() * conv.pooled_width() * s.out_channels);
  conv.run(x.data(), y.data(), relu);
  for (size_t i = 0; i < y.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(y[i])) << "element " << i;
    } else {
      EXPECT_NEAR(y[i], expected[i], 1e-5 * (1 + std::abs(expected[i]))) << "element " << i;
    }
  }
}

}  // namespace

TEST(ShallowConvPool, MatchesConvReluAndPoolingInFloat64) {
  if (!ShallowConvPool::supports({1, 1, 28, 28, 32, 3, 3})) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::mt19937 rng(7);
  for (const int threads : {1, 2}) {
    flow::set_num_threads(threads);
    for (const int64_t out : {16, 32, 48, 64}) {
      for (const int64_t in : {1, 3, 4}) {
        // 28x28 with 3x3: 26x26 -> 13x13; 12x11 with 2x4: 11x8 -> 5x4 (a last row dropped).
        for (const auto& [h, w, kh, kw] : {std::array<int64_t, 4>{28, 28, 3, 3}, std::array<int64_t, 4>{12, 11, 2, 4}}) {
          const ShallowConvPoolShape s{5, in, h, w, out, kh, kw};
          expect_matches(s, random_values(static_cast<size_t>(s.batch * in * h * w), rng), out != 48, out != 16, rng);
        }
      }
    }
  }
  flow::set_num_threads(2);
  // A batch large enough to split over threads: 64 LeNet images.
  const ShallowConvPoolShape lenet{64, 1, 28, 28, 32, 3, 3};
  expect_matches(lenet, random_values(64 * 28 * 28, rng), true, true, rng);
}

TEST(ShallowConvPool, PropagatesNaNAndKeepsMinusInfinityWithoutReLU) {
  if (!ShallowConvPool::supports({1, 1, 28, 28, 32, 3, 3})) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::mt19937 rng(8);
  const ShallowConvPoolShape s{2, 1, 9, 9, 16, 2, 2};
  std::vector<float> x = random_values(2 * 9 * 9, rng);
  x[0] = std::numeric_limits<float>::quiet_NaN();   // image 0: the first window's first tap
  x[81 + 40] = std::numeric_limits<float>::quiet_NaN();  // image 1: a middle pixel, four windows
  for (const bool relu : {true, false}) expect_matches(s, x, true, relu, rng);
  // Every input -inf with positive weights and no bias: the whole output -inf without the ReLU, 0 with it.
  const std::vector<float> minus_inf(2 * 9 * 9, -std::numeric_limits<float>::infinity()), ones(16 * 4, 1.f);
  ShallowConvPool conv(s, ones.data(), nullptr);
  std::vector<float> y(static_cast<size_t>(2 * conv.pooled_height() * conv.pooled_width() * 16));
  conv.run(minus_inf.data(), y.data(), false);
  for (float v : y) EXPECT_EQ(v, -std::numeric_limits<float>::infinity());
  conv.run(minus_inf.data(), y.data(), true);
  for (float v : y) EXPECT_EQ(v, 0.f);
}

TEST(ShallowConvPool, RefusesWhatItDoesNotCompute) {
  if (!ShallowConvPool::supports({1, 1, 28, 28, 32, 3, 3})) GTEST_SKIP() << "no AVX-512 on this CPU";
  EXPECT_FALSE(ShallowConvPool::supports({1, 5, 28, 28, 32, 3, 3}));   // five input channels
  EXPECT_FALSE(ShallowConvPool::supports({1, 1, 28, 28, 24, 3, 3}));   // not a multiple of 16
  EXPECT_FALSE(ShallowConvPool::supports({1, 1, 28, 28, 80, 3, 3}));   // more than 64
  EXPECT_FALSE(ShallowConvPool::supports({1, 4, 28, 28, 32, 3, 4}));   // 48 weights per output channel
  EXPECT_FALSE(ShallowConvPool::supports({1, 1, 3, 28, 32, 3, 3}));    // a convolution output 1 row high
  EXPECT_FALSE(ShallowConvPool::supports({0, 1, 28, 28, 32, 3, 3}));   // no images
  EXPECT_TRUE(ShallowConvPool::supports({1, 4, 28, 28, 64, 3, 3}));
}
