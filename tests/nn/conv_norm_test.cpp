#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <thread>
#include <vector>

#include "common/gradcheck.h"
#include "common/reference.h"
#include "common/test_util.h"
#include "nn/conv_norm.h"

using flow::Shape;
using flow::Tensor;
using flow::TensorList;
using flow::testing::grad_input;
using flow::testing::gradcheck;
namespace nn = flow::nn;

TEST(ConvNorm, GradientsOfConvPoolAndNorms) {
  flow::manual_seed(21);
  EXPECT_TRUE(gradcheck([](const TensorList& v) { return flow::conv2d(v[0], v[1], v[2], {2, 1}, {1, 0}, {1, 2}, 2); },
                        {grad_input({2, 4, 5, 6}), grad_input({4, 2, 2, 2}), grad_input({4})}));
  EXPECT_TRUE(gradcheck([](const TensorList& v) { return flow::max_pool2d(v[0], {2, 2}, {1, 1}); }, {grad_input({1, 2, 4, 4})}));
  // Windows that tile the plane (stride = window) write the gradient whole, odd sizes leaving
  // rows and columns no window covers.
  EXPECT_TRUE(gradcheck([](const TensorList& v) { return flow::max_pool2d(v[0], {2, 2}); }, {grad_input({1, 2, 5, 7})}));
  EXPECT_TRUE(gradcheck([](const TensorList& v) { return flow::avg_pool2d(v[0], {3, 3}, {2, 2}, {1, 1}); }, {grad_input({1, 2, 5, 5})}));
  auto bn = std::make_shared<nn::BatchNorm2d>(3);
  bn->to(flow::kFloat64);
  EXPECT_TRUE(gradcheck([&](const TensorList& v) { return (*bn)(v[0]); }, {grad_input({4, 3, 2, 2})}));
  auto ln = std::make_shared<nn::LayerNorm>(std::vector<int64_t>{4});
  ln->to(flow::kFloat64);
  EXPECT_TRUE(gradcheck([&](const TensorList& v) { return (*ln)(v[0]); }, {grad_input({3, 4})}));
  auto gn = std::make_shared<nn::GroupNorm>(2, 4);
  gn->to(flow::kFloat64);
  EXPECT_TRUE(gradcheck([&](const TensorList& v) { return (*gn)(v[0]); }, {grad_input({2, 4, 3})}));
  auto conv1d = std::make_shared<nn::Conv1d>(2, 3, 3, 1, 1);
  conv1d->to(flow::kFloat64);
  EXPECT_TRUE(gradcheck([&](const TensorList& v) { return (*conv1d)(v[0]); }, {grad_input({2, 2, 5})}));
  // Second order through conv: its gradient primitives have vjps of their own.
  EXPECT_TRUE(gradcheck(
      [](const TensorList& v) {
        Tensor y = flow::sum(flow::conv2d(v[0], v[1]) * flow::conv2d(v[0], v[1]));
        return flow::autograd::grad({y}, {v[0]}, {}, false, true)[0];
      },
      {grad_input({1, 2, 4, 4}), grad_input({2, 2, 3, 3})}));
}

TEST(ConvNorm, BatchNormRunningStatsAndEval) {
  flow::manual_seed(22);
  nn::BatchNorm2d bn(2, 1e-5, 0.5);
  Tensor x = flow::randn({8, 2, 3, 3}) * 2 + 1;
  Tensor y = bn(x);
  flow::testing::expect_close(flow::mean(y, {0, 2, 3}), flow::zeros({2}), 0, 1e-5);
  flow::testing::expect_close(bn.running_mean, flow::mean(x, {0, 2, 3}) * 0.5, 1e-5, 1e-6);
  flow::testing::expect_close(bn.running_var, flow::var(x, {0, 2, 3}) * 0.5 + 0.5, 1e-5, 1e-6);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);
  bn.eval();
  Tensor e = bn(x);
  flow::testing::expect_close(e, (x - bn.running_mean.reshape({1, 2, 1, 1})) / flow::sqrt(bn.running_var.reshape({1, 2, 1, 1}) + 1e-5),
                              1e-5, 1e-5);
  EXPECT_EQ(bn.state_dict().keys(),
            (std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"}));
  EXPECT_THROW_MSG(bn(flow::zeros({2, 3, 2, 2})), "[BatchNorm2d] expected 2 channels");
}

TEST(ConvNorm, LayersPrintAndShape) {
  std::ostringstream out;
  out << nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)) << "\n" << nn::MaxPool2d(2) << "\n" << nn::BatchNorm2d(32);
  EXPECT_EQ(out.str(),
            "Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))\n"
            "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)\n"
            "BatchNorm2d(32, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)");
  nn::AdaptiveAvgPool2d adaptive(std::vector<int64_t>{2, 3});
  Tensor x = flow::randn({1, 2, 5, 7});
  Tensor pooled = adaptive(x);
  EXPECT_EQ(pooled.shape(), (Shape{1, 2, 2, 3}));
  EXPECT_NEAR(pooled.tolist<float>()[0], flow::mean(x.slice(2, 0, 3).slice(3, 0, 3).select(1, 0)).item<float>(), 1e-6);
  nn::Embedding embedding(10, 4);
  EXPECT_EQ(embedding(flow::tensor<int64_t>({1, 2, 3, 9}, Shape{2, 2})).shape(), (Shape{2, 2, 4}));
}

TEST(ConvNorm, ConvTransposeIsTheAdjointOfConv) {
  flow::manual_seed(23);
  // <conv(x, w), y> == <x, conv_transpose(y, w)> for every x, y.
  Tensor x = flow::randn({2, 4, 7, 6}, flow::kFloat64), w = flow::randn({6, 2, 3, 2}, flow::kFloat64);
  Tensor y = flow::randn(flow::conv2d(x, w, Tensor(), {2, 1}, {1, 0}, {1, 1}, 2).shape(), flow::kFloat64);
  Tensor back = flow::conv_transpose2d(y, w, Tensor(), {2, 1}, {1, 0}, {0, 0}, {1, 1}, 2);
  ASSERT_EQ(back.shape(), x.shape());
  EXPECT_NEAR(flow::sum(flow::conv2d(x, w, Tensor(), {2, 1}, {1, 0}, {1, 1}, 2) * y).item<double>(), flow::sum(x * back).item<double>(), 1e-9);
  nn::ConvTranspose2d up(nn::ConvTranspose2dOptions(3, 2, 3).stride(2).padding(1).output_padding(1));
  EXPECT_EQ(up(flow::randn({1, 3, 5, 5})).shape(), (Shape{1, 2, 10, 10}));
  up.to(flow::kFloat64);
  EXPECT_TRUE(gradcheck([&](const TensorList& v) { return up(v[0]); }, {grad_input({1, 3, 3, 3})}));
  EXPECT_THROW_MSG(flow::conv_transpose2d(flow::zeros({1, 3, 4, 4}), flow::zeros({2, 2, 3, 3})), "[conv_transpose2d] weight (2,2,3,3) expects 2 input channels");
}

TEST(ConvNorm, Float32ConvGradientsMatchFloat64Path) {
  // float32 convolution runs in oneDNN (its weight gradient with under 8 input channels per group
  // in im2col + GEMM, as float64 does), float64 in im2col + GEMM: their gradients must agree.
  flow::manual_seed(24);
  for (const auto& layout : {std::pair<int64_t, int64_t>{4, 1}, {4, 2}, {1, 1}, {12, 1}, {12, 2}}) {
    const int64_t channels = layout.first, groups = layout.second;  // clang 14: lambdas capture no structured bindings
    SCOPED_TRACE(::testing::Message() << channels << " channels, " << groups << " groups");
    Tensor x64 = flow::randn({3, channels, 9, 8}, flow::kFloat64), w64 = flow::randn({6, channels / groups, 3, 3}, flow::kFloat64);
    Tensor b64 = flow::randn({6}, flow::kFloat64), g64 = flow::randn({3, 6, 5, 8}, flow::kFloat64);
    auto grads = [&](flow::DType dtype) {
      Tensor x = x64.to(dtype).requires_grad_(), w = w64.to(dtype).requires_grad_(), b = b64.to(dtype).requires_grad_();
      Tensor y = flow::conv2d(x, w, b, {2, 1}, {1, 1}, {1, 1}, groups);
      return flow::autograd::grad({flow::sum(y * g64.to(dtype))}, {x, w, b});
    };
    const TensorList single = grads(flow::kFloat32), reference = grads(flow::kFloat64);
    for (size_t i = 0; i < 3; ++i) flow::testing::expect_close(single[i], reference[i], 1e-4, 1e-4);
  }
}

TEST(ConvNorm, NormForwardsMatchReference) {
  flow::manual_seed(26);
  // Reference: normalise each group of `group` consecutive values (double, population variance).
  auto reference = [](const Tensor& x, int64_t group, double eps) {
    auto v = flow::testing::values(x);
    for (size_t start = 0; start < v.size(); start += static_cast<size_t>(group)) {
      double mean = 0, var = 0;
      for (int64_t i = 0; i < group; ++i) mean += v[start + i];
      mean /= group;
      for (int64_t i = 0; i < group; ++i) var += (v[start + i] - mean) * (v[start + i] - mean);
      var /= group;
      for (int64_t i = 0; i < group; ++i) v[start + i] = (v[start + i] - mean) / std::sqrt(var + eps);
    }
    return flow::tensor(v, x.shape());
  };
  Tensor x = flow::randn({3, 4, 5}) * 3 + 2;
  nn::LayerNorm ln({4, 5}, 1e-5);
  flow::testing::expect_close(ln(x), reference(x, 20, 1e-5), 1e-4, 1e-5);
  nn::GroupNorm gn(2, 4, 1e-5);
  flow::testing::expect_close(gn(x), reference(x, 10, 1e-5), 1e-4, 1e-5);
  ln.weight.requires_grad_(false).fill_(2);
  ln.bias.requires_grad_(false).fill_(1);
  flow::testing::expect_close(ln(x), reference(x, 20, 1e-5) * 2.0 + 1.0, 1e-4, 1e-5);
  EXPECT_THROW_MSG(ln(flow::zeros({3, 5, 4})), "[layer_norm] input (3,5,4) does not end with normalized_shape (4,5)");
}

// flow caches its oneDNN primitives and runs them on whichever thread calls. Two that need a
// scratchpad (a dilated convolution's weight gradient is an im2col + GEMM on AVX2), made on this
// thread and then run at once on two others, must not share their temporaries.
TEST(ConvNorm, CachedPrimitivesRunAtOnceOnOtherThreads) {
  struct Case {
    Tensor x, w, g, expected;
  };
  const auto weight_grad = [](const Case& c) {
    Tensor w = c.w.detach().requires_grad_();
    flow::sum(flow::conv2d(c.x, w, Tensor(), {1, 1}, {0, 0}, {2, 2}) * c.g).backward();
    return w.grad();
  };
  flow::manual_seed(9);
  std::vector<Case> cases{{flow::randn({2, 3, 16, 16}), flow::randn({8, 3, 3, 3}), flow::randn({2, 8, 12, 12}), Tensor()},
                          {flow::randn({2, 4, 14, 14}), flow::randn({6, 4, 3, 3}), flow::randn({2, 6, 10, 10}), Tensor()}};
  for (Case& c : cases) c.expected = weight_grad(c);
  std::vector<int> mismatches(cases.size(), 0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < cases.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const auto got = weight_grad(cases[t]).tolist<float>(), want = cases[t].expected.tolist<float>();
        for (size_t j = 0; j < got.size(); ++j) mismatches[t] += std::abs(got[j] - want[j]) > 1e-4f * (1 + std::abs(want[j])) ? 1 : 0;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches, std::vector<int>(cases.size(), 0));
}
