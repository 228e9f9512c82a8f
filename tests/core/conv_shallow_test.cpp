// flow's direct convolution of few-input-channel layers (core/kernels/cpu/conv_shallow.h, the
// forward and weight-gradient kernels conv2d takes for a network's first layer) against float64
// loops: row widths with every partial last vector, every partial block of output channels, tap
// counts split into several blocks, padding, bias or none, float32 and bfloat16 (one rounding),
// NaN, one and two threads, and the shapes it refuses.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/kernels/cpu/conv_shallow.h"
#include "core/thread_pool.h"

using flow::BFloat16;
using flow::cpu::ShallowConvShape;

namespace {

ShallowConvShape shape_of(int64_t batch, int64_t in, int64_t out, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t ph, int64_t pw) {
  return {batch, in, h, w, out, h + 2 * ph - kh + 1, w + 2 * pw - kw + 1, kh, kw, ph, pw};
}

size_t x_at(const ShallowConvShape& s, int64_t n, int64_t c, int64_t y, int64_t x) {
  return static_cast<size_t>(((n * s.in_channels + c) * s.height + y) * s.width + x);
}
size_t w_at(const ShallowConvShape& s, int64_t o, int64_t c, int64_t i, int64_t j) {
  return static_cast<size_t>(((o * s.in_channels + c) * s.kernel_h + i) * s.kernel_w + j);
}
size_t y_at(const ShallowConvShape& s, int64_t n, int64_t o, int64_t y, int64_t x) {
  return static_cast<size_t>(((n * s.out_channels + o) * s.out_height + y) * s.out_width + x);
}

// Calls fn(n, o, oy, ox, c, i, j, input index) for every product of the convolution that does not
// fall on the padding.
template <typename Fn>
void for_each_product(const ShallowConvShape& s, Fn&& fn) {
  for (int64_t n = 0; n < s.batch; ++n) {
    for (int64_t o = 0; o < s.out_channels; ++o) {
      for (int64_t oy = 0; oy < s.out_height; ++oy) {
        for (int64_t ox = 0; ox < s.out_width; ++ox) {
          for (int64_t c = 0; c < s.in_channels; ++c) {
            for (int64_t i = 0; i < s.kernel_h; ++i) {
              for (int64_t j = 0; j < s.kernel_w; ++j) {
                const int64_t iy = oy - s.pad_h + i, ix = ox - s.pad_w + j;
                if (iy >= 0 && iy < s.height && ix >= 0 && ix < s.width) fn(n, o, oy, ox, c, i, j, x_at(s, n, c, iy, ix));
              }
            }
          }
        }
      }
    }
  }
}

template <typename T>
std::vector<double> wide(const std::vector<T>& v) {
  std::vector<double> out;
  for (const T& e : v) out.push_back(static_cast<float>(e));
  return out;
}

template <typename T>
std::vector<T> random_values(size_t count, std::mt19937& gen) {
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<T> v(count);
  for (T& e : v) e = T(dist(gen));
  return v;
}

// |actual - expected| within float32 summation error, or one bfloat16 rounding of it.
template <typename T>
void expect_near_all(const std::vector<T>& actual, const std::vector<double>& expected, const char* what) {
  ASSERT_EQ(actual.size(), expected.size());
  const double relative = std::is_same_v<T, float> ? 1e-5 : std::ldexp(1.0, -8);
  for (size_t i = 0; i < expected.size(); ++i) {
    const double got = static_cast<float>(actual[i]);
    ASSERT_NEAR(got, expected[i], relative * std::abs(expected[i]) + 1e-5) << what << " at " << i;
  }
}

std::string describe(const ShallowConvShape& s, int threads) {
  return (::testing::Message() << "in " << s.in_channels << " out " << s.out_channels << " " << s.height << "x" << s.width << " window "
                               << s.kernel_h << "x" << s.kernel_w << " pad " << s.pad_h << "," << s.pad_w << " batch " << s.batch << " threads "
                               << threads)
      .GetString();
}

template <typename T>
void check_forward(const ShallowConvShape& s, bool bias, int threads) {
  SCOPED_TRACE(describe(s, threads) + (bias ? " bias" : ""));
  ASSERT_TRUE(flow::cpu::shallow_conv_supports(s));
  std::mt19937 gen(7);
  const auto x = random_values<T>(static_cast<size_t>(s.batch * s.in_channels * s.height * s.width), gen);
  const auto w = random_values<T>(static_cast<size_t>(s.out_channels * s.in_channels * s.kernel_h * s.kernel_w), gen);
  const auto b = random_values<T>(static_cast<size_t>(s.out_channels), gen);
  std::vector<double> expected(static_cast<size_t>(s.batch * s.out_channels * s.out_height * s.out_width));
  for (int64_t n = 0; n < s.batch; ++n) {
    for (int64_t o = 0; o < s.out_channels; ++o) {
      for (int64_t p = 0; p < s.out_height * s.out_width; ++p) expected[y_at(s, n, o, 0, 0) + p] = bias ? static_cast<float>(b[o]) : 0.0;
    }
  }
  for_each_product(s, [&](int64_t n, int64_t o, int64_t oy, int64_t ox, int64_t c, int64_t i, int64_t j, size_t xi) {
    expected[y_at(s, n, o, oy, ox)] += double{static_cast<float>(x[xi])} * static_cast<float>(w[w_at(s, o, c, i, j)]);
  });
  std::vector<T> y(expected.size() + 8, T(-7.0f));  // the guard past the end must stay
  flow::set_num_threads(threads);
  flow::cpu::shallow_conv_forward<T>(s, x.data(), w.data(), bias ? b.data() : nullptr, y.data());
  for (size_t i = expected.size(); i < y.size(); ++i) ASSERT_EQ(static_cast<float>(y[i]), -7.0f) << "written past the end";
  y.resize(expected.size());
  expect_near_all(y, expected, "forward");
}

template <typename T>
void check_grad_weight(const ShallowConvShape& s, int threads) {
  SCOPED_TRACE(describe(s, threads));
  std::mt19937 gen(11);
  const auto x = random_values<T>(static_cast<size_t>(s.batch * s.in_channels * s.height * s.width), gen);
  const auto grad = random_values<T>(static_cast<size_t>(s.batch * s.out_channels * s.out_height * s.out_width), gen);
  std::vector<double> expected(static_cast<size_t>(s.out_channels * s.in_channels * s.kernel_h * s.kernel_w), 0.0);
  for_each_product(s, [&](int64_t n, int64_t o, int64_t oy, int64_t ox, int64_t c, int64_t i, int64_t j, size_t xi) {
    expected[w_at(s, o, c, i, j)] += double{static_cast<float>(x[xi])} * static_cast<float>(grad[y_at(s, n, o, oy, ox)]);
  });
  std::vector<T> grad_weight(expected.size(), T(123.0f));
  flow::set_num_threads(threads);
  flow::cpu::shallow_conv_grad_weight<T>(s, grad.data(), x.data(), grad_weight.data());
  // A weight's gradient sums batch x output-plane products: float32 sums drift by more than one ulp.
  double scale = 0;
  for (double e : expected) scale = std::max(scale, std::abs(e));
  for (size_t i = 0; i < expected.size(); ++i) {
    const double tolerance = (std::is_same_v<T, float> ? 1e-5 : std::ldexp(1.0, -8)) * std::abs(expected[i]) + 1e-5 * scale;
    ASSERT_NEAR(static_cast<float>(grad_weight[i]), expected[i], tolerance) << "grad_weight at " << i;
  }
}

class ShallowConvTest : public ::testing::Test {
 protected:
  void TearDown() override { flow::set_num_threads(1); }
};

// Output widths 8-17 and 26 give every partial last vector and 1-4 vectors a row; 1-5 output
// channels every block of 4; 5x5 windows split taps 6 + 6 + 6 + 6 + 1.
TEST_F(ShallowConvTest, ForwardMatchesFloat64) {
  for (int64_t width = 10; width <= 19; ++width) check_forward<float>(shape_of(2, 1, 5, 5, width, 3, 3, 0, 0), true, 1);
  check_forward<float>(shape_of(3, 1, 32, 28, 28, 3, 3, 0, 0), true, 1);  // the LeNet's first layer
  check_forward<float>(shape_of(3, 1, 32, 28, 28, 3, 3, 0, 0), false, 2);
  for (int64_t out = 1; out <= 5; ++out) check_forward<float>(shape_of(2, 3, out, 9, 12, 3, 3, 1, 1), true, 2);
  check_forward<float>(shape_of(1, 4, 6, 7, 40, 3, 3, 1, 2), true, 2);  // 36 taps, uneven padding
  check_forward<float>(shape_of(2, 1, 7, 12, 12, 5, 5, 2, 2), false, 1);
  check_forward<float>(shape_of(1, 2, 3, 4, 33, 1, 4, 0, 0), true, 1);  // a 1-row window
}

TEST_F(ShallowConvTest, GradWeightMatchesFloat64) {
  for (int64_t width = 10; width <= 19; ++width) check_grad_weight<float>(shape_of(2, 1, 3, 5, width, 3, 3, 0, 0), 1);
  check_grad_weight<float>(shape_of(5, 1, 32, 28, 28, 3, 3, 0, 0), 2);  // images split unevenly over two threads
  for (int64_t out = 1; out <= 3; ++out) check_grad_weight<float>(shape_of(3, 3, out, 9, 12, 3, 3, 1, 1), 2);
  check_grad_weight<float>(shape_of(1, 4, 5, 7, 40, 3, 3, 1, 2), 1);
  check_grad_weight<float>(shape_of(2, 1, 7, 12, 12, 5, 5, 2, 2), 2);
  check_grad_weight<float>(shape_of(1, 1, 2, 3, 9, 3, 1, 0, 0), 2);  // fewer multiply-adds than a thread is woken for
}

TEST_F(ShallowConvTest, BFloat16RoundsFloat32SumsOnce) {
  for (int64_t width = 10; width <= 19; ++width) check_forward<BFloat16>(shape_of(2, 1, 5, 4, width, 3, 3, 0, 0), true, 1);
  check_forward<BFloat16>(shape_of(3, 1, 32, 28, 28, 3, 3, 0, 0), true, 2);
  check_forward<BFloat16>(shape_of(1, 3, 5, 9, 12, 3, 3, 1, 1), false, 1);
  for (int64_t width = 10; width <= 19; ++width) check_grad_weight<BFloat16>(shape_of(2, 1, 3, 5, width, 3, 3, 0, 0), 1);
  check_grad_weight<BFloat16>(shape_of(3, 2, 5, 9, 12, 3, 3, 1, 1), 2);
}

TEST_F(ShallowConvTest, NaNReachesEveryOutputItTouches) {
  const ShallowConvShape s = shape_of(1, 1, 2, 4, 9, 3, 3, 1, 1);
  std::vector<float> x(36, 1.0f), w(18, 1.0f), y(72);
  x[0] = std::numeric_limits<float>::quiet_NaN();  // under the first 2x2 outputs' windows
  flow::cpu::shallow_conv_forward<float>(s, x.data(), w.data(), nullptr, y.data());
  for (int64_t o = 0; o < 2; ++o) {
    for (int64_t p = 0; p < 36; ++p) EXPECT_EQ(std::isnan(y[o * 36 + p]), p % 9 < 2 && p / 9 < 2) << o << " " << p;
  }
  std::vector<BFloat16> xb(x.begin(), x.end()), wb(w.begin(), w.end()), yb(72);
  flow::cpu::shallow_conv_forward<BFloat16>(s, xb.data(), wb.data(), nullptr, yb.data());
  EXPECT_EQ(yb[0].bits, BFloat16(std::numeric_limits<float>::quiet_NaN()).bits);
  EXPECT_EQ(static_cast<float>(yb[49]), 9.0f);  // an interior output: 9 ones
}

TEST_F(ShallowConvTest, RefusesShapesItDoesNotRun) {
  EXPECT_TRUE(flow::cpu::shallow_conv_supports(shape_of(1, 4, 8, 8, 8, 3, 3, 1, 1)));
  EXPECT_FALSE(flow::cpu::shallow_conv_supports(shape_of(1, 5, 8, 8, 8, 3, 3, 1, 1)));  // 5 input channels
  EXPECT_FALSE(flow::cpu::shallow_conv_supports(shape_of(1, 1, 8, 12, 12, 7, 7, 3, 3)));  // 49 taps
  EXPECT_FALSE(flow::cpu::shallow_conv_supports(shape_of(1, 1, 8, 9, 9, 3, 3, 0, 0)));  // 7 output columns
  ShallowConvShape strided = shape_of(1, 1, 8, 20, 20, 3, 3, 0, 0);
  strided.out_width = 9;  // not a stride-1 output size
  EXPECT_FALSE(flow::cpu::shallow_conv_supports(strided));
}

}  // namespace
