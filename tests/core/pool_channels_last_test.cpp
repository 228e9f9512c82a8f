// Max pooling over channels-last (NHWC) buffers (cpu::max_pool_channels_last in
// core/kernels/cpu/pool_loop.h, oneflow_lite's pooling where oneDNN's convolutions chose NHWC)
// against a scan over NCHW: channel counts taken 64, 32, 16, 8 and 1 at a time, whole and clipped windows,
// windows fixed at compile time and not, NaN kept and -inf windows giving -inf.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/kernels/cpu/pool_loop.h"
#include "core/thread_pool.h"

namespace {

struct Case {
  int64_t batch, channels, h, w, kh, kw, sh, sw, ph, pw;
  int64_t oh() const { return (h + 2 * ph - kh) / sh + 1; }
  int64_t ow() const { return (w + 2 * pw - kw) / sw + 1; }
};

// max over each window of an NCHW buffer, the first NaN met winning.
std::vector<float> reference(const Case& c, const std::vector<float>& nchw) {
  std::vector<float> out;
  for (int64_t n = 0; n < c.batch; ++n) {
    for (int64_t ch = 0; ch < c.channels; ++ch) {
      for (int64_t y = 0; y < c.oh(); ++y) {
        for (int64_t x = 0; x < c.ow(); ++x) {
          float best = -std::numeric_limits<float>::infinity();
          bool nan = false;
          for (int64_t i = 0; i < c.kh; ++i) {
            for (int64_t j = 0; j < c.kw; ++j) {
              const int64_t iy = y * c.sh - c.ph + i, ix = x * c.sw - c.pw + j;
              if (iy < 0 || iy >= c.h || ix < 0 || ix >= c.w) continue;
              const float v = nchw[static_cast<size_t>(((n * c.channels + ch) * c.h + iy) * c.w + ix)];
              nan = nan || std::isnan(v);
              best = std::max(best, v);
            }
          }
          out.push_back(nan ? std::numeric_limits<float>::quiet_NaN() : best);
        }
      }
    }
  }
  return out;
}

void check(const Case& c, int threads) {
  SCOPED_TRACE(::testing::Message() << "channels " << c.channels << " " << c.h << "x" << c.w << " window " << c.kh << "x" << c.kw
                                    << " stride " << c.sh << "," << c.sw << " pad " << c.ph << "," << c.pw << " threads " << threads);
  std::mt19937 gen(5);
  std::normal_distribution<float> dist;
  std::vector<float> nchw(static_cast<size_t>(c.batch * c.channels * c.h * c.w));
  for (float& v : nchw) v = dist(gen);
  nchw[1] = std::numeric_limits<float>::quiet_NaN();
  for (int64_t x = 0; x < c.w; ++x) nchw[static_cast<size_t>(c.h * c.w * (c.batch * c.channels - 1) + x)] = -std::numeric_limits<float>::infinity();
  std::vector<float> nhwc(nchw.size());
  for (int64_t n = 0; n < c.batch; ++n) {
    for (int64_t ch = 0; ch < c.channels; ++ch) {
      for (int64_t p = 0; p < c.h * c.w; ++p) nhwc[static_cast<size_t>((n * c.h * c.w + p) * c.channels + ch)] = nchw[static_cast<size_t>((n * c.channels + ch) * c.h * c.w + p)];
    }
  }
  const flow::Attrs attrs = flow::Attrs()
                                .set("kernel_size", std::vector<int64_t>{c.kh, c.kw})
                                .set("stride", std::vector<int64_t>{c.sh, c.sw})
                                .set("padding", std::vector<int64_t>{c.ph, c.pw});
  const flow::cpu::PoolGeometry g = flow::cpu::blocked_pool_geometry({c.batch, c.channels, c.h, c.w}, {c.batch, c.channels, c.oh(), c.ow()},
                                                                     attrs, flow::cpu::channels_last_block(c.channels));
  std::vector<float> out(static_cast<size_t>(c.batch * c.oh() * c.ow() * c.channels));
  flow::set_num_threads(threads);
  flow::cpu::max_pool_channels_last(g, c.channels, nhwc.data(), out.data());
  flow::set_num_threads(1);
  const std::vector<float> expected = reference(c, nchw);
  for (int64_t n = 0; n < c.batch; ++n) {
    for (int64_t ch = 0; ch < c.channels; ++ch) {
      for (int64_t p = 0; p < c.oh() * c.ow(); ++p) {
        const float want = expected[static_cast<size_t>((n * c.channels + ch) * c.oh() * c.ow() + p)];
        const float got = out[static_cast<size_t>((n * c.oh() * c.ow() + p) * c.channels + ch)];
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(got)) << "image " << n << " channel " << ch << " output " << p;
        } else {
          ASSERT_EQ(got, want) << "image " << n << " channel " << ch << " output " << p;
        }
      }
    }
  }
}

TEST(PoolChannelsLast, MatchesAScanOverNchw) {
  EXPECT_EQ(flow::cpu::channels_last_block(128), 64);
  EXPECT_EQ(flow::cpu::channels_last_block(96), 32);
  EXPECT_EQ(flow::cpu::channels_last_block(48), 16);
  EXPECT_EQ(flow::cpu::channels_last_block(24), 8);
  EXPECT_EQ(flow::cpu::channels_last_block(3), 1);
  for (int64_t channels : {1, 3, 8, 16, 24, 32, 48, 64, 96}) {
    check({2, channels, 8, 9, 2, 2, 2, 2, 0, 0}, 1);  // whole 2x2 windows, an odd column left out
    check({2, channels, 7, 7, 3, 3, 1, 1, 1, 1}, 2);  // 3x3 windows clipped at every edge
    check({3, channels, 6, 10, 3, 2, 2, 1, 1, 0}, 2);  // a window size read at run time
  }
}

// One image of up to 64 channels is one plane: the threads split its output rows (resnet's pooling
// after the stem at batch 1), each row's windows reading the rows above and below it.
TEST(PoolChannelsLast, ThreadsSplitTheRowsOfOnePlane) {
  for (int64_t channels : {32, 64}) {
    for (int threads : {2, 3}) check({1, channels, 40, 40, 3, 3, 2, 2, 1, 1}, threads);
  }
}

}  // namespace
