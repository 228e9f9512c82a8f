#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>
#include <limits>

#include "common/reference.h"
#include "common/test_util.h"

using flow::Shape;
using flow::Tensor;
using flow::testing::values;

namespace {
Tensor reference_conv(const Tensor& x, const Tensor& w, const Tensor& b, std::vector<int64_t> s, std::vector<int64_t> p,
                      std::vector<int64_t> d, int64_t groups) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), wd = x.size(3), o = w.size(0), kh = w.size(2), kw = w.size(3);
  const int64_t oh = (h + 2 * p[0] - d[0] * (kh - 1) - 1) / s[0] + 1, ow = (wd + 2 * p[1] - d[1] * (kw - 1) - 1) / s[1] + 1;
  const auto vx = values(x), vw = values(w);
  const auto vb = b.defined() ? values(b) : std::vector<double>(static_cast<size_t>(o), 0.0);
  const int64_t cg = c / groups, og = o / groups;
  std::vector<double> out;
  for (int64_t in = 0; in < n; ++in)
    for (int64_t oc = 0; oc < o; ++oc)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t xx = 0; xx < ow; ++xx) {
          double acc = vb[oc];
          const int64_t g = oc / og;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t iy = y * s[0] - p[0] + i * d[0], ix = xx * s[1] - p[1] + j * d[1];
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                acc += vx[((in * c + g * cg + ci) * h + iy) * wd + ix] * vw[((oc * cg + ci) * kh + i) * kw + j];
              }
          out.push_back(acc);
        }
  return flow::tensor(out, Shape{n, o, oh, ow});
}
}  // namespace

TEST(Conv, MatchesReference) {
  flow::manual_seed(20);
  struct Case {
    Shape x, w;
    std::vector<int64_t> s, p, d;
    int64_t groups;
  };
  for (const auto& c : std::vector<Case>{{{2, 3, 7, 6}, {4, 3, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1},
                                         {{1, 4, 9, 8}, {6, 2, 3, 2}, {2, 1}, {1, 2}, {1, 2}, 2},
                                         {{3, 1, 28, 28}, {32, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1}}) {
    for (flow::DType dtype : {flow::kFloat32, flow::kFloat64}) {
      Tensor x = flow::randn(c.x, dtype), w = flow::randn(c.w, dtype), b = flow::randn({c.w[0]}, dtype);
      flow::testing::expect_close(flow::conv2d(x, w, b, c.s, c.p, c.d, c.groups), reference_conv(x, w, b, c.s, c.p, c.d, c.groups), 1e-4, 1e-4);
    }
  }
}

// oneDNN's convolution runs on its own layouts: the copies of the input, weights and result
// reordered into them come from flow's caching allocator, so a repeated call touches no fresh
// pages (each first touch is a page fault; in some VMs they cost a third of a bfloat16 resnet's
// run). Each call here reorders at least 2 x 2 MiB where oneDNN picks a blocked or channels-last
// layout; where it keeps NCHW there is nothing to reorder.
TEST(Conv, RepeatedCallsTouchNoFreshPages) {
  flow::manual_seed(3);
  const Tensor x = flow::randn({2, 64, 64, 64}), w = flow::randn({64, 64, 3, 3});
  for (int i = 0; i < 3; ++i) flow::conv2d(x, w, Tensor(), {1, 1}, {1, 1});
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  for (int i = 0; i < 5; ++i) flow::conv2d(x, w, Tensor(), {1, 1}, {1, 1});
  getrusage(RUSAGE_SELF, &after);
  EXPECT_LT(after.ru_minflt - before.ru_minflt, 256) << "page faults in 5 calls";
}

TEST(Conv, Pooling) {
  Tensor x = flow::arange(32, flow::kFloat32).reshape({1, 2, 4, 4});
  Tensor m = flow::max_pool2d(x, {2, 2});
  EXPECT_EQ(m.shape(), (Shape{1, 2, 2, 2}));
  EXPECT_EQ(m.tolist<float>(), (std::vector<float>{5, 7, 13, 15, 21, 23, 29, 31}));
  Tensor a = flow::avg_pool2d(x, {2, 2});
  EXPECT_EQ(a.tolist<float>(), (std::vector<float>{2.5, 4.5, 10.5, 12.5, 18.5, 20.5, 26.5, 28.5}));
  Tensor padded = flow::avg_pool2d(x, {3, 3}, {2, 2}, {1, 1});
  EXPECT_EQ(padded.shape(), (Shape{1, 2, 2, 2}));
  EXPECT_FLOAT_EQ(padded.tolist<float>()[0], (0 + 1 + 4 + 5) / 9.f);
}

TEST(Conv, Errors) {
  EXPECT_THROW_MSG(flow::conv2d(flow::zeros({1, 3, 5, 5}), flow::zeros({2, 2, 3, 3})), "[conv2d] weight (2,2,3,3) expects 2 input channels");
  EXPECT_THROW_MSG(flow::conv2d(flow::zeros({3, 5, 5}), flow::zeros({2, 3, 3, 3})), "[conv2d] expected 4-d input");
  EXPECT_THROW_MSG(flow::conv2d(flow::zeros({1, 3, 2, 2}), flow::zeros({2, 3, 3, 3})),
                   "[conv2d] calculated padded input size per channel: (2 x 2). Kernel size: (3 x 3). Kernel size can't be greater");
  EXPECT_THROW_MSG(flow::conv2d(flow::zeros({1, 4, 5, 5}), flow::zeros({3, 2, 3, 3}), flow::Tensor(), {1, 1}, {0, 0}, {1, 1}, 2),
                   "[conv2d] groups 2 must divide");
  EXPECT_THROW_MSG(flow::max_pool2d(flow::zeros({1, 1, 4, 4}), {2, 2}, {0, 1}), "[max_pool2d] stride must be >= 1");
  EXPECT_THROW_MSG(flow::max_pool2d(flow::zeros({1, 1, 4, 4}), {2, 2}, {}, {2, 2}), "[max_pool2d] pad should be at most half");
}

// An infinite input pixel in the last of an odd number of input channels reaches, in bfloat16,
// the outputs it reaches in float32 and no others: oneDNN's bfloat16 kernels pair input channels,
// and with an odd count would read the next pixel against a zero weight (inf * 0 = NaN there), so
// those convolutions compute in float32. Strided, so that flow's shallow kernel does not take them.
TEST(Conv, Bfloat16WithAnOddChannelCountKeepsAnInfinityToItsOwnOutputs) {
  flow::manual_seed(5);
  for (int64_t channels : {1, 2, 3}) {
    Tensor x = flow::randn({2, channels, 16, 16}).contiguous();
    x.data_ptr<float>()[(channels - 1) * 256 + 6 * 16 + 6] = -std::numeric_limits<float>::infinity();
    const Tensor w = flow::randn({16, channels, 3, 3}).to(flow::kBFloat16).to(flow::kFloat32);
    const auto expected = values(flow::conv2d(x.to(flow::kBFloat16).to(flow::kFloat32), w, Tensor(), {2, 2}, {1, 1}));
    const auto actual = values(flow::conv2d(x.to(flow::kBFloat16), w.to(flow::kBFloat16), Tensor(), {2, 2}, {1, 1}).to(flow::kFloat32));
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t i = 0; i < actual.size(); ++i) {
      EXPECT_EQ(std::isnan(actual[i]), std::isnan(expected[i])) << channels << " channels, at " << i;
      EXPECT_EQ(std::isinf(actual[i]), std::isinf(expected[i])) << channels << " channels, at " << i;
    }
  }
}
