// avg_pool2d's ceil_mode, count_include_pad and divisor_override, functional and nn::AvgPool2d:
// outputs and input gradients from torch 1.13, the gradient checker to second order, float32
// beside float64, and PyTorch's errors.
#include <gtest/gtest.h>

#include <sstream>

#include "autograd/engine.h"
#include "common/gradcheck.h"
#include "common/reference.h"
#include "common/test_util.h"
#include "nn/conv_norm.h"
#include "nn/functional.h"

using flow::Shape;
using flow::Tensor;
namespace F = flow::nn::functional;

namespace {

struct Options {
  std::vector<int64_t> kernel, stride, padding;
  bool ceil_mode = false, count_include_pad = true;
  std::optional<int64_t> divisor_override;
};

Tensor pool(const Tensor& x, const Options& o) {
  return F::avg_pool2d(x, o.kernel, o.stride, o.padding, o.ceil_mode, o.count_include_pad, o.divisor_override);
}

struct Expected {
  Options options;
  Shape input, output;
  std::vector<double> out, grad;  // grad: of sum(out)
};

void expect_near(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << "element " << i;
}

// Inputs are 1, 2, 3, ... in row-major order; values from torch.nn.functional.avg_pool2d.
TEST(AvgPoolOptions, OutputsAndGradientsArePyTorchs) {
  const std::vector<Expected> cases{
      // Ceil mode keeps a partial last window, divided by what it covers of the input.
      {{{2, 2}, {2, 2}, {0, 0}, true}, {1, 1, 5, 5}, {1, 1, 3, 3}, {4, 6, 7.5, 14, 16, 17.5, 21.5, 23.5, 25},
       {0.25, 0.25, 0.25, 0.25, 0.5, 0.25, 0.25, 0.25, 0.25, 0.5, 0.25, 0.25, 0.25, 0.25, 0.5, 0.25, 0.25, 0.25, 0.25, 0.5,
        0.5, 0.5, 0.5, 0.5, 1}},
      // The padding counts, but not the part of the last window past it.
      {{{3, 3}, {2, 2}, {1, 1}, true},
       {1, 1, 6, 6},
       {1, 1, 4, 4},
       {2, 4, 5.333333, 3, 9, 15, 17, 9, 17, 27, 29, 15, 10.5, 16.5, 17.5, 9},
       {0.111111, 0.222222, 0.111111, 0.222222, 0.111111, 0.277778, 0.222222, 0.444444, 0.222222, 0.444444, 0.222222, 0.555556,
        0.111111, 0.222222, 0.111111, 0.222222, 0.111111, 0.277778, 0.222222, 0.444444, 0.222222, 0.444444, 0.222222, 0.555556,
        0.111111, 0.222222, 0.111111, 0.222222, 0.111111, 0.277778, 0.277778, 0.555556, 0.277778, 0.555556, 0.277778, 0.694444}},
      {{{3, 3}, {2, 2}, {1, 1}, true, false},
       {1, 1, 6, 6},
       {1, 1, 4, 4},
       {4.5, 6, 8, 9, 13.5, 15, 17, 18, 25.5, 27, 29, 30, 31.5, 33, 35, 36},
       {0.25, 0.416667, 0.166667, 0.333333, 0.166667, 0.666667, 0.416667, 0.694444, 0.277778, 0.555556, 0.277778, 1.111111,
        0.166667, 0.277778, 0.111111, 0.222222, 0.111111, 0.444444, 0.333333, 0.555556, 0.222222, 0.444444, 0.222222, 0.888889,
        0.166667, 0.277778, 0.111111, 0.222222, 0.111111, 0.444444, 0.666667, 1.111111, 0.444444, 0.888889, 0.444444, 1.777778}},
      // Ceil mode would give 4 rows, but the 4th window would start in the right padding: dropped.
      {{{2, 2}, {2, 2}, {1, 1}, true},
       {1, 1, 5, 5},
       {1, 1, 3, 3},
       {0.25, 1.25, 2.25, 4.25, 10, 12, 9.25, 20, 22},
       std::vector<double>(25, 0.25)},
      {{{3, 3}, {2, 2}, {1, 1}, false, false},
       {1, 1, 5, 5},
       {1, 1, 3, 3},
       {4, 5.5, 7, 11.5, 13, 14.5, 19, 20.5, 22},
       {0.25, 0.416667, 0.166667, 0.416667, 0.25, 0.416667, 0.694444, 0.277778, 0.694444, 0.416667, 0.166667, 0.277778, 0.111111,
        0.277778, 0.166667, 0.416667, 0.694444, 0.277778, 0.694444, 0.416667, 0.25, 0.416667, 0.166667, 0.416667, 0.25}},
      {{{3, 3}, {2, 2}, {1, 1}, false, true, 3},
       {1, 1, 5, 5},
       {1, 1, 3, 3},
       {5.333333, 11, 9.333333, 23, 39, 29, 25.333334, 41, 29.333334},
       {0.333333, 0.666667, 0.333333, 0.666667, 0.333333, 0.666667, 1.333333, 0.666667, 1.333333, 0.666667, 0.333333, 0.666667, 0.333333,
        0.666667, 0.333333, 0.666667, 1.333333, 0.666667, 1.333333, 0.666667, 0.333333, 0.666667, 0.333333, 0.666667, 0.333333}},
      {{{2, 2}, {2, 2}, {0, 0}, true, false, 5}, {1, 1, 5, 5}, {1, 1, 3, 3}, {3.2, 4.8, 3, 11.2, 12.8, 7, 8.6, 9.4, 5}, std::vector<double>(25, 0.2)},
      // A window wider than the input still gives one output in ceil mode.
      {{{3, 3}, {3, 3}, {0, 0}, true}, {1, 1, 2, 2}, {1, 1, 1, 1}, {2.5}, {0.25, 0.25, 0.25, 0.25}},
      // Unequal sizes per dim; the last input row is in no window.
      {{{2, 3}, {3, 2}, {1, 1}, true, false},
       {1, 1, 4, 7},
       {1, 1, 2, 4},
       {1.5, 3, 5, 6.5, 19, 20.5, 22.5, 24},
       {0.5, 0.833333, 0.333333, 0.666667, 0.333333, 0.833333, 0.5, 0, 0, 0, 0, 0, 0, 0, 0.25, 0.416667, 0.166667, 0.333333, 0.166667,
        0.416667, 0.25, 0.25, 0.416667, 0.166667, 0.333333, 0.166667, 0.416667, 0.25}},
  };
  for (const auto dtype : {flow::kFloat64, flow::kFloat32}) {
    for (size_t i = 0; i < cases.size(); ++i) {
      SCOPED_TRACE("case " + std::to_string(i) + " " + flow::dtype_name(dtype));
      const Expected& c = cases[i];
      Tensor x = flow::arange(1.0, static_cast<double>(c.input.numel()) + 1, 1.0, flow::TensorOptions(dtype)).reshape(c.input);
      x.requires_grad_(true);
      const Tensor y = pool(x, c.options);
      EXPECT_EQ(y.shape(), c.output);
      expect_near(flow::testing::values(y), c.out);
      flow::sum(y).backward();
      expect_near(flow::testing::values(x.grad()), c.grad);
    }
  }
}

TEST(AvgPoolOptions, PassTheGradientCheckerToSecondOrder) {
  flow::manual_seed(38);
  const std::vector<std::pair<Options, Shape>> cases{{{{3, 3}, {2, 2}, {1, 1}, true, false}, {2, 2, 6, 7}},
                                                     {{{2, 3}, {3, 2}, {1, 1}, true, true}, {1, 2, 4, 7}},
                                                     {{{3, 2}, {2, 1}, {1, 0}, false, false, 4}, {1, 1, 5, 4}}};
  for (const auto& [case_options, shape] : cases) {
    const Options& options = case_options;  // clang 14 cannot capture a structured binding
    EXPECT_TRUE(flow::testing::gradcheck([&](const flow::TensorList& in) { return pool(in[0], options); }, {flow::testing::grad_input(shape)}));
    EXPECT_TRUE(flow::testing::gradcheck(
        [&](const flow::TensorList& in) {
          const Tensor y = flow::sum(flow::pow(pool(in[0] * in[0], options), 2));
          return flow::autograd::grad({y}, {in[0]}, {}, false, /*create_graph=*/true)[0];
        },
        {flow::testing::grad_input(shape)}));
  }
}

TEST(AvgPoolOptions, ModuleTakesTheOptions) {
  const Tensor x = flow::randn({2, 3, 7, 6});
  flow::nn::AvgPool2d module(flow::nn::AvgPool2dOptions({3, 2}).stride(2).padding({1, 1}).ceil_mode(true).count_include_pad(false).divisor_override(5));
  const Tensor expected = F::avg_pool2d(x, {3, 2}, {2, 2}, {1, 1}, true, false, 5);
  EXPECT_EQ(flow::testing::values(module.forward(x)), flow::testing::values(expected));
  std::ostringstream out;
  out << module << " " << flow::nn::AvgPool2d(2);
  EXPECT_EQ(out.str(), "AvgPool2d(kernel_size=(3, 2), stride=2, padding=1) AvgPool2d(kernel_size=2, stride=2, padding=0)");
}

TEST(AvgPoolOptions, ErrorsArePyTorchs) {
  const Tensor x = flow::zeros({1, 1, 5, 5});
  EXPECT_THROW_MSG(F::avg_pool2d(x, {2, 2}, {2, 2}, {0, 0}, false, true, 0), "[avg_pool2d] divisor must be not zero");
  EXPECT_THROW_MSG(F::avg_pool2d(x, {2, 2}, {2, 2}, {2, 2}, true), "[avg_pool2d] pad should be at most half of the kernel size");
  EXPECT_THROW_MSG(F::avg_pool2d(flow::zeros({1, 1, 2, 2}), {3, 3}, {3, 3}, {0, 0}, false, false), "Output size is too small");
  EXPECT_THROW_MSG(F::avg_pool2d(flow::zeros({5, 5}), {2, 2}, {2, 2}, {0, 0}, true), "[avg_pool2d] expected 4-d input");
  EXPECT_THROW_MSG(F::avg_pool2d(flow::zeros({1, 1, 5, 5}, flow::kInt64), {2, 2}, {2, 2}, {0, 0}, true), "[avg_pool2d] expected a floating input");
}

}  // namespace
