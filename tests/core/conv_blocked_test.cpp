// flow's direct convolution on nChw8c (core/kernels/cpu/conv_blocked.h, oneflow_lite's AVX2
// convolutions) against a float64 loop over plain NCHW: every register tile shape (1-3 output
// blocks, every pixel count of a row), padding, strides, the residual it adds onto, its ReLU with
// NaN, and the row split it uses for small batches on several threads.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/kernels/cpu/conv_blocked.h"
#include "core/thread_pool.h"

using flow::cpu::BlockedConv;
using flow::cpu::BlockedConvShape;

namespace {

// Index of channel ch at position p (of hw) of image i, plain NCHW and nChw8c.
size_t plain_at(int64_t i, int64_t ch, int64_t p, int64_t c, int64_t hw) { return static_cast<size_t>((i * c + ch) * hw + p); }
size_t blocked_at(int64_t i, int64_t ch, int64_t p, int64_t c, int64_t hw) {
  return static_cast<size_t>(((i * (c / 8) + ch / 8) * hw + p) * 8 + ch % 8);
}

std::vector<float> relayout(const std::vector<float>& from, int64_t n, int64_t c, int64_t hw, bool to_blocked) {
  std::vector<float> to(from.size());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t p = 0; p < hw; ++p) {
        const size_t plain = plain_at(i, ch, p, c, hw), blocked = blocked_at(i, ch, p, c, hw);
        to[to_blocked ? blocked : plain] = from[to_blocked ? plain : blocked];
      }
    }
  }
  return to;
}

// relu(residual + conv(x) + bias) in float64 over NCHW (each part optional).
std::vector<double> reference(const BlockedConvShape& s, const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& bias,
                              const std::vector<float>& residual, bool relu) {
  std::vector<double> out;
  for (int64_t n = 0; n < s.batch; ++n) {
    for (int64_t oc = 0; oc < s.out_channels; ++oc) {
      for (int64_t oh = 0; oh < s.out_height; ++oh) {
        for (int64_t ow = 0; ow < s.out_width; ++ow) {
          double acc = bias.empty() ? 0.0 : bias[static_cast<size_t>(oc)];
          for (int64_t ic = 0; ic < s.in_channels; ++ic) {
            for (int64_t i = 0; i < s.kernel_h; ++i) {
              for (int64_t j = 0; j < s.kernel_w; ++j) {
                const int64_t ih = oh * s.stride_h - s.pad_h + i, iw = ow * s.stride_w - s.pad_w + j;
                if (ih < 0 || ih >= s.height || iw < 0 || iw >= s.width) continue;
                acc += double{x[static_cast<size_t>(((n * s.in_channels + ic) * s.height + ih) * s.width + iw)]} *
                       w[static_cast<size_t>(((oc * s.in_channels + ic) * s.kernel_h + i) * s.kernel_w + j)];
              }
            }
          }
          if (!residual.empty()) acc += residual[out.size()];
          out.push_back(relu && !(acc >= 0.0) && !std::isnan(acc) ? 0.0 : acc);
        }
      }
    }
  }
  return out;
}

BlockedConvShape shape_of(int64_t batch, int64_t in, int64_t out, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                          int64_t ph, int64_t pw) {
  return {batch, in, h, w, out, (h + 2 * ph - kh) / sh + 1, (w + 2 * pw - kw) / sw + 1, kh, kw, sh, sw, ph, pw};
}

std::vector<float> random_values(size_t count, std::mt19937& gen) {
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(count);
  for (float& e : v) e = dist(gen);
  return v;
}

// Runs the convolution on x (NCHW) with random weights and compares with the reference;
// residual: NCHW or empty.
void expect_matches(const BlockedConvShape& s, const std::vector<float>& x, std::mt19937& gen, bool with_bias,
                    const std::vector<float>& residual, bool relu) {
  const std::vector<float> w = random_values(static_cast<size_t>(s.out_channels * s.in_channels * s.kernel_h * s.kernel_w), gen);
  const std::vector<float> bias = with_bias ? random_values(static_cast<size_t>(s.out_channels), gen) : std::vector<float>();
  const int64_t out_plane = s.out_height * s.out_width;
  // NaN where nothing is written: an output the kernel skips shows.
  std::vector<float> dst(static_cast<size_t>(s.batch * s.out_channels * out_plane), std::numeric_limits<float>::quiet_NaN());
  if (!residual.empty()) dst = relayout(residual, s.batch, s.out_channels, out_plane, true);
  const BlockedConv conv(s, w.data(), with_bias ? bias.data() : nullptr);
  conv.run(relayout(x, s.batch, s.in_channels, s.height * s.width, true).data(), dst.data(), !residual.empty(), relu);
  const std::vector<float> got = relayout(dst, s.batch, s.out_channels, out_plane, false);
  const std::vector<double> want = reference(s, x, w, bias, residual, relu);
  ASSERT_EQ(got.size(), want.size());
  const double tolerance = 1e-5 * (1.0 + static_cast<double>(s.in_channels * s.kernel_h * s.kernel_w) / 8);
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "at " << i;
    } else {
      ASSERT_NEAR(got[i], want[i], tolerance) << "at " << i;
    }
  }
}

class BlockedConvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!BlockedConv::supports(shape_of(1, 8, 8, 3, 3, 3, 3, 1, 1, 0, 0))) GTEST_SKIP() << "built without AVX2";
  }
  std::mt19937 gen_{7};
};

}  // namespace

TEST_F(BlockedConvTest, EveryTileShapePaddingAndStride) {
  struct Case {
    int64_t in, out, h, w, kh, kw, sh, sw, ph, pw;
  };
  // Output widths 1-13 cover every pixel count of the 1- and 2-block tiles (up to 12 and 6
  // pixels); 24 and 40 output channels split as 1 + 2 and 1 + 2 + 2 blocks; 32 input channels
  // take two slices.
  const std::vector<Case> cases = {
      {8, 8, 5, 13, 3, 3, 1, 1, 1, 1},    {8, 16, 7, 7, 3, 3, 1, 1, 1, 1},  {16, 24, 6, 9, 3, 3, 1, 1, 0, 0},   {8, 40, 9, 9, 3, 3, 2, 2, 1, 1},
      {32, 64, 13, 13, 3, 3, 1, 1, 0, 0}, {8, 8, 4, 1, 3, 1, 1, 1, 1, 0},   {16, 8, 8, 11, 5, 5, 1, 2, 2, 2}, {8, 16, 10, 12, 2, 3, 2, 1, 0, 1},
      {24, 8, 3, 3, 3, 3, 1, 1, 1, 1},    {8, 16, 14, 14, 3, 3, 2, 2, 1, 1}, {8, 8, 2, 2, 3, 3, 1, 1, 2, 2},
  };
  for (const Case& c : cases) {
    for (int64_t batch : {1, 2}) {
      const BlockedConvShape s = shape_of(batch, c.in, c.out, c.h, c.w, c.kh, c.kw, c.sh, c.sw, c.ph, c.pw);
      SCOPED_TRACE(::testing::Message() << c.in << "->" << c.out << " " << c.h << "x" << c.w << " k" << c.kh << "x" << c.kw << " s" << c.sh
                                        << "x" << c.sw << " p" << c.ph << "x" << c.pw << " batch " << batch);
      ASSERT_TRUE(BlockedConv::supports(s));
      expect_matches(s, random_values(static_cast<size_t>(batch * c.in * c.h * c.w), gen_), gen_, batch == 1, {}, false);
    }
  }
}

TEST_F(BlockedConvTest, AddsOntoTheResidualThenReluKeepingNan) {
  const BlockedConvShape s = shape_of(2, 16, 24, 7, 10, 3, 3, 1, 1, 1, 1);
  std::vector<float> x = random_values(static_cast<size_t>(2 * 16 * 7 * 10), gen_);
  x[3 * 70 + 4 * 10 + 5] = std::numeric_limits<float>::quiet_NaN();  // sample 0, channel 3: a 3x3 patch of every output channel
  const std::vector<float> residual = random_values(static_cast<size_t>(2 * 24 * 7 * 10), gen_);
  expect_matches(s, x, gen_, true, residual, true);
  expect_matches(s, x, gen_, false, {}, true);
}

TEST_F(BlockedConvTest, RowsSplitOverThreadsForSmallBatches) {
  const int threads = flow::get_num_threads();
  flow::set_num_threads(2);
  const BlockedConvShape s = shape_of(1, 16, 16, 9, 9, 3, 3, 1, 1, 1, 1);
  expect_matches(s, random_values(static_cast<size_t>(16 * 81), gen_), gen_, true, {}, true);
  flow::set_num_threads(threads);
}

TEST_F(BlockedConvTest, RefusesWhatItDoesNotRun) {
  EXPECT_FALSE(BlockedConv::supports(shape_of(1, 8, 8, 5, 5, 1, 1, 1, 1, 0, 0)));   // 1x1: oneDNN's GEMM-based kernel
  EXPECT_FALSE(BlockedConv::supports(shape_of(1, 4, 8, 5, 5, 3, 3, 1, 1, 0, 0)));   // input channels
  EXPECT_FALSE(BlockedConv::supports(shape_of(1, 8, 12, 5, 5, 3, 3, 1, 1, 0, 0)));  // output channels
  EXPECT_FALSE(BlockedConv::supports(shape_of(1, 8, 8, 9, 9, 3, 3, 1, 3, 0, 0)));   // column stride 3
  BlockedConvShape too_wide = shape_of(1, 8, 8, 5, 5, 3, 3, 1, 1, 0, 0);
  too_wide.out_width += 1;  // a window past the padded source
  EXPECT_FALSE(BlockedConv::supports(too_wide));
}
