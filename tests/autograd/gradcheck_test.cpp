// Every differentiable core op through the shared finite-difference gradient checker.
#include <gtest/gtest.h>

#include "common/gradcheck.h"
#include "common/test_util.h"

using flow::Shape;
using flow::Tensor;
using flow::TensorList;
using flow::testing::grad_input;
using flow::testing::gradcheck;

namespace {
struct Case {
  const char* name;
  std::function<Tensor(const TensorList&)> fn;
  std::vector<Shape> shapes;
  double low = -1, high = 1;
};

std::vector<Case> cases() {
  using L = const TensorList&;
  return {
      {"neg", [](L x) { return -x[0]; }, {{3, 2}}},
      {"abs", [](L x) { return flow::abs(x[0]); }, {{5}}, 0.2, 1},
      {"exp", [](L x) { return flow::exp(x[0]); }, {{3, 2}}},
      {"log", [](L x) { return flow::log(x[0]); }, {{4}}, 0.5, 2},
      {"sqrt", [](L x) { return flow::sqrt(x[0]); }, {{4}}, 0.5, 2},
      {"rsqrt", [](L x) { return flow::rsqrt(x[0]); }, {{4}}, 0.5, 2},
      {"sin", [](L x) { return flow::sin(x[0]); }, {{4}}},
      {"cos", [](L x) { return flow::cos(x[0]); }, {{4}}},
      {"tanh", [](L x) { return flow::tanh(x[0]); }, {{4}}},
      {"sigmoid", [](L x) { return flow::sigmoid(x[0]); }, {{4}}},
      {"relu", [](L x) { return flow::relu(x[0]); }, {{6}}},
      {"gelu", [](L x) { return flow::gelu(x[0]); }, {{6}}},
      {"gelu_tanh", [](L x) { return flow::gelu(x[0], "tanh"); }, {{6}}},
      {"silu", [](L x) { return flow::silu(x[0]); }, {{6}}},
      {"softplus", [](L x) { return flow::softplus(x[0]); }, {{6}}, -3, 3},
      // beta * x crosses the threshold 1 at x = 0.5: both branches (the seeded draws keep clear of it).
      {"softplus_beta_threshold", [](L x) { return flow::softplus(x[0], 2, 1); }, {{8}}, -3, 3},
      {"tril", [](L x) { return flow::tril(x[0], -1); }, {{2, 3, 4}}},
      {"triu", [](L x) { return x[0].triu(1); }, {{4, 3}}},
      {"cumsum", [](L x) { return flow::cumsum(x[0], 1); }, {{2, 5, 3}}},
      {"cumsum_last", [](L x) { return flow::cumsum(x[0], -1); }, {{3, 4}}},
      // The seeded draws are distinct, so a small step never reorders them.
      {"sort", [](L x) { return flow::sort(x[0], 0).values; }, {{4, 3}}},
      {"sort_descending", [](L x) { return flow::sort(x[0], -1, true).values; }, {{2, 5}}},
      {"topk", [](L x) { return flow::topk(x[0], 2, 1).values; }, {{3, 4}}},
      {"topk_smallest_unsorted", [](L x) { return flow::topk(x[0], 3, 0, false, false).values; }, {{5, 2}}},
      {"clamp", [](L x) { return flow::clamp(x[0], -0.5, 0.5); }, {{8}}},
      {"add_broadcast", [](L x) { return x[0] + x[1]; }, {{2, 3}, {3}}},
      {"sub_alpha", [](L x) { return flow::sub(x[0], x[1], 2.0); }, {{2, 1}, {1, 3}}},
      {"mul_broadcast", [](L x) { return x[0] * x[1]; }, {{2, 3}, {2, 1}}},
      {"div", [](L x) { return x[0] / (x[1] + 3.0); }, {{2, 3}, {3}}},
      {"pow", [](L x) { return flow::pow(x[0] + 2.0, x[1]); }, {{4}, {4}}},
      {"maximum", [](L x) { return flow::maximum(x[0], x[1]); }, {{5}, {5}}},
      {"minimum", [](L x) { return flow::minimum(x[0], x[1]); }, {{5}, {5}}},
      {"scalar_ops", [](L x) { return (2.0 - x[0]) * 3.0 / 2.0 + 1.0 - x[0] / 4.0; }, {{3}}},
      {"rdiv_scalar", [](L x) { return 2.0 / (x[0] + 3.0); }, {{3}}},
      {"pow_scalar", [](L x) { return flow::pow(x[0] + 2.0, 3); }, {{3}}},
      {"rpow_scalar", [](L x) { return flow::pow(2.0, x[0]); }, {{3}}},
      {"where", [](L x) { return flow::where(flow::gt(x[0], 0), x[0], x[1]); }, {{6}, {6}}},
      {"sum_dims", [](L x) { return flow::sum(x[0], {0, 2}, true); }, {{2, 3, 2}}},
      {"mean", [](L x) { return flow::mean(x[0], {1}); }, {{3, 4}}},
      {"prod", [](L x) { return flow::prod(x[0], {1}); }, {{2, 3}}, 0.5, 1.5},
      {"max_all", [](L x) { return flow::max(x[0]); }, {{7}}},
      {"min_dims", [](L x) { return flow::min(x[0], 1).values; }, {{3, 4}}},
      {"max_dim_keepdim", [](L x) { return flow::max(x[0], 0, true).values; }, {{3, 4}}},
      {"var", [](L x) { return flow::var(x[0], {1}); }, {{3, 4}}},
      {"std", [](L x) { return flow::std(x[0], {0}, 0); }, {{4, 2}}},
      {"logsumexp", [](L x) { return flow::logsumexp(x[0], {1}); }, {{3, 4}}},
      {"softmax", [](L x) { return flow::softmax(x[0], 1); }, {{3, 4}}},
      {"log_softmax", [](L x) { return flow::log_softmax(x[0], 0); }, {{3, 4}}},
      {"matmul", [](L x) { return flow::matmul(x[0], x[1]); }, {{3, 4}, {4, 2}}},
      {"matmul_batched_broadcast", [](L x) { return flow::matmul(x[0], x[1]); }, {{2, 3, 4}, {4, 2}}},
      {"matmul_vector", [](L x) { return flow::matmul(x[0], x[1]); }, {{4}, {4, 2}}},
      {"linear", [](L x) { return flow::linear(x[0], x[1], x[2]); }, {{2, 3, 4}, {5, 4}, {5}}},
      {"views", [](L x) { return x[0].t().reshape({6}).unsqueeze(0).expand({2, 6}).flatten(); }, {{2, 3}}},
      {"slice_select_narrow", [](L x) { return x[0].slice(1, 0, 4, 2).select(0, 1) * x[0].narrow(0, 0, 1).squeeze(0).slice(0, 1, 3); },
       {{3, 4}}},
      {"permute", [](L x) { return x[0].permute({2, 0, 1}) * 2.0; }, {{2, 3, 2}}},
      {"cat_stack", [](L x) { return flow::cat({x[0], flow::stack({x[1], x[1]}, 0)}, 0); }, {{1, 3}, {3}}},
      {"split", [](L x) { return flow::split(x[0], 2, 1)[1] * 3.0; }, {{2, 5}}},
      {"index_select", [](L x) { return flow::index_select(x[0], 1, flow::tensor<int64_t>({2, 0, 2})); }, {{2, 3}}},
      {"gather", [](L x) { return flow::gather(x[0], 1, flow::tensor<int64_t>({0, 0, 2, 1}, Shape{2, 2})); }, {{2, 3}}},
      {"scatter", [](L x) { return flow::scatter(x[0], 1, flow::tensor<int64_t>({0, 2}, Shape{2, 1}), x[1]); }, {{2, 3}, {2, 1}}},
      {"scatter_add", [](L x) { return flow::scatter_add(x[0], 0, flow::tensor<int64_t>({1, 1, 0}, Shape{1, 3}), x[1]); },
       {{2, 3}, {1, 3}}},
      {"masked_fill", [](L x) { return flow::masked_fill(x[0], flow::tensor<bool>({true, false, true}), 2.0); }, {{2, 3}}},
      {"as_strided", [](L x) { return flow::as_strided(x[0], {2, 2}, {3, 2}, 1) * 2.0; }, {{3, 3}}},
      {"as_strided_scatter", [](L x) { return flow::as_strided_scatter(x[0], x[1], {2, 2}, {1, 3}, 2); }, {{3, 4}, {2, 2}}},
      {"binary_cross_entropy", [](L x) { return flow::binary_cross_entropy_elementwise(x[0], x[1]); }, {{2, 3}, {2, 3}}, 0.05, 0.95},
      {"cast_roundtrip", [](L x) { return x[0].to(flow::kFloat32).to(flow::kFloat64) * 1.0; }, {{3}}},
  };
}
}  // namespace

TEST(Gradcheck, EveryDifferentiableOp) {
  flow::manual_seed(10);
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.name);
    TensorList inputs;
    for (const auto& shape : c.shapes) inputs.push_back(grad_input(shape, c.low, c.high));
    flow::testing::GradcheckOptions options;
    if (std::string(c.name) == "cast_roundtrip") {
      options.eps = 1e-2;  // the function is linear; a large step keeps float32 rounding out of the difference
      options.atol = 1e-4;
    }
    EXPECT_TRUE(gradcheck(c.fn, inputs, options));
  }
}

TEST(Gradcheck, InPlaceCopyPassesGradientToSource) {
  auto src = grad_input({3});
  EXPECT_TRUE(gradcheck(
      [](const TensorList& x) {
        Tensor buffer = flow::zeros({2, 3}, flow::kFloat64);
        buffer.copy_(x[0] * 2.0);
        return buffer;
      },
      {src}));
}

TEST(Gradcheck, SecondOrderThroughComposites) {
  auto x = grad_input({4});
  EXPECT_TRUE(gradcheck(
      [](const TensorList& in) {
        Tensor y = flow::sum(flow::tanh(in[0]) * in[0] * in[0]);
        return flow::autograd::grad({y}, {in[0]}, {}, false, /*create_graph=*/true)[0];
      },
      {x}));
}

// Second order through the new ops' vjps: softplus's is functional (sigmoid, where), cumsum's is a
// reversed cumsum whose own vjp runs forward again, tril's is tril.
TEST(Gradcheck, SecondOrderThroughSoftplusCumsumAndTril) {
  flow::manual_seed(12);
  const auto second_order = [](const std::function<Tensor(const Tensor&)>& f) {
    return [f](const TensorList& in) {
      Tensor y = flow::sum(f(in[0]) * f(in[0]));  // quadratic in f, so the second derivative reads f's first
      return flow::autograd::grad({y}, {in[0]}, {}, false, /*create_graph=*/true)[0];
    };
  };
  EXPECT_TRUE(gradcheck(second_order([](const Tensor& x) { return flow::softplus(x, 2, 1); }), {grad_input({6}, -2, 2)}));
  EXPECT_TRUE(gradcheck(second_order([](const Tensor& x) { return flow::softplus(x); }), {grad_input({4}, -3, 3)}));
  EXPECT_TRUE(gradcheck(second_order([](const Tensor& x) { return flow::cumsum(x * x, 1); }), {grad_input({2, 4})}));
  EXPECT_TRUE(gradcheck(second_order([](const Tensor& x) { return flow::tril(x * x, 1); }), {grad_input({3, 3})}));
}

// Second order through softmax_grad and log_softmax_grad (the gradient ops' own vjps): the
// first gradient of sum(softmax(x) * w) is softmax_grad(w, softmax(x)), checked against x and w.
TEST(Gradcheck, SecondOrderThroughSoftmaxGradients) {
  flow::manual_seed(13);
  for (bool log_output : {false, true}) {
    SCOPED_TRACE(log_output ? "log_softmax" : "softmax");
    EXPECT_TRUE(gradcheck(
        [log_output](const TensorList& in) {
          const Tensor y = log_output ? flow::log_softmax(in[0], 1) : flow::softmax(in[0], 1);
          return flow::autograd::grad({flow::sum(y * in[1])}, {in[0]}, {}, false, /*create_graph=*/true)[0];
        },
        {grad_input({3, 5}), grad_input({3, 5})}));
  }
}

TEST(Gradcheck, HandComputedCumsumAndTrilGradients) {
  Tensor x = flow::randn({2, 4}).requires_grad_(true);
  const Tensor weights = flow::tensor<float>({1, 2, 3, 4, 5, 6, 7, 8}, Shape{2, 4});
  flow::sum(flow::cumsum(x, 1) * weights).backward();
  // d/dx_j sum_i w_i cumsum_i = sum_{i >= j} w_i: the reversed cumsum of the weights.
  EXPECT_EQ(x.grad().tolist<float>(), (std::vector<float>{10, 9, 7, 4, 26, 21, 15, 8}));
  Tensor m = flow::randn({2, 3, 3}).requires_grad_(true);
  flow::sum(flow::tril(m, -1) * 2.0).backward();
  EXPECT_EQ(m.grad().tolist<float>(), flow::tril(flow::full({2, 3, 3}, 2.0), -1).tolist<float>());
}

TEST(Gradcheck, HandComputedSortAndTopkGradients) {
  Tensor x = flow::tensor<float>({3, 1, 2, 9}, Shape{4}).requires_grad_(true);
  const Tensor weights = flow::tensor<float>({1, 2, 3, 4}, Shape{4});
  // Each sorted value's weight goes back to where the value came from: ascending order is 1, 2, 3, 9.
  flow::sum(flow::sort(x).values * weights).backward();
  EXPECT_EQ(x.grad().tolist<float>(), (std::vector<float>{3, 1, 2, 4}));
  Tensor y = flow::tensor<float>({3, 1, 2, 9}, Shape{4}).requires_grad_(true);
  flow::sum(flow::topk(y, 2).values * weights.narrow(0, 0, 2)).backward();  // 9 then 3; 1 and 2 get nothing
  EXPECT_EQ(y.grad().tolist<float>(), (std::vector<float>{2, 0, 0, 1}));
  // Second order: the vjp is a scatter_add, whose own vjp gathers.
  EXPECT_TRUE(gradcheck(
      [](const TensorList& in) {
        Tensor z = flow::sum(flow::topk(in[0] * in[0], 2, 0).values * in[0].narrow(0, 0, 2));
        return flow::autograd::grad({z}, {in[0]}, {}, false, /*create_graph=*/true)[0];
      },
      {grad_input({4, 2}, 0.5, 2)}));
}

TEST(Gradcheck, SecondOrderThroughViewWritesAndBinaryCrossEntropy) {
  auto x = grad_input({3}, 0.1, 0.9), t = grad_input({3}, 0.1, 0.9);
  EXPECT_TRUE(gradcheck(
      [](const TensorList& in) {
        Tensor buffer = flow::zeros({2, 3}, flow::kFloat64) + in[1];
        buffer.select(0, 1).copy_(in[0] * in[0]);
        Tensor y = flow::sum(flow::binary_cross_entropy_elementwise(flow::sigmoid(buffer), flow::ones({2, 3}, flow::kFloat64) * 0.3));
        return flow::autograd::grad({y}, {in[0], in[1]}, {}, false, /*create_graph=*/true)[0];
      },
      {x, t}));
}
