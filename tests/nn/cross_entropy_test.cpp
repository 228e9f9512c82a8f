// The fused cross-entropy (sparse_softmax_cross_entropy and its gradient op), which
// nn::functional::cross_entropy takes on the CPU: the same losses and gradients, bit for bit, as
// log_softmax + nll_loss (float32, float64, bfloat16 under autocast, ignored rows, every
// reduction), first and second derivatives through the gradient checker, and its argument checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "autograd/engine.h"
#include "common/gradcheck.h"
#include "common/test_util.h"
#include "core/flow.h"
#include "nn/functional.h"

using flow::Shape;
using flow::Tensor;
using flow::TensorList;
namespace F = flow::nn::functional;

namespace {

constexpr int64_t kIgnored = -100;

// Labels in [0, classes) with every third row ignored.
Tensor labels_for(int64_t rows, int64_t classes) {
  std::vector<int64_t> labels;
  for (int64_t n = 0; n < rows; ++n) labels.push_back(n % 3 == 1 ? kIgnored : (n * 7919) % classes);
  return flow::tensor<int64_t>(labels, Shape{rows});
}

// The composite formula cross_entropy used before the fused op: log_softmax (widening a 16-bit
// input as autocast chose) and nll_loss.
Tensor composite(const Tensor& logits, const Tensor& labels, F::Reduction reduction) {
  const Tensor log_probs = flow::is_reduced_floating(logits.dtype()) ? flow::log_softmax(logits, 1, flow::kFloat32) : flow::log_softmax(logits, 1);
  return F::nll_loss(log_probs, labels, F::NLLLossOptions().ignore_index(kIgnored).reduction(reduction));
}

Tensor fused(const Tensor& logits, const Tensor& labels, F::Reduction reduction) {
  return F::cross_entropy(logits, labels, F::CrossEntropyLossOptions().ignore_index(kIgnored).reduction(reduction));
}

// Loss and logits gradient of `loss_of` at a copy of logits.
std::pair<Tensor, Tensor> loss_and_grad(const Tensor& logits, const std::function<Tensor(const Tensor&)>& loss_of) {
  const Tensor x = logits.detach().clone().requires_grad_();
  const Tensor loss = loss_of(x);
  const Tensor upstream = flow::arange(loss.numel(), flow::kFloat32).reshape(loss.shape()).to(loss.dtype()) * 0.25 + 0.5;
  loss.backward(upstream);
  return {loss.detach(), x.grad()};
}

void expect_same_bits(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.dtype(), b.dtype());
  ASSERT_EQ(a.shape(), b.shape());
  EXPECT_EQ(a.to(flow::kFloat64).tolist<double>(), b.to(flow::kFloat64).tolist<double>());
}

}  // namespace

TEST(CrossEntropy, FusedGivesTheCompositeBits) {
  flow::manual_seed(21);
  for (flow::DType dtype : {flow::kFloat32, flow::kFloat64}) {
    for (const auto& [rows, classes] : std::vector<std::pair<int64_t, int64_t>>{{7, 5}, {6, 1037}, {4, 50257}}) {
      for (F::Reduction reduction : {F::Reduction::kMean, F::Reduction::kSum, F::Reduction::kNone}) {
        SCOPED_TRACE(std::string(flow::dtype_name(dtype)) + " " + std::to_string(rows) + "x" + std::to_string(classes));
        const Tensor logits = (flow::randn({rows, classes}) * 4).to(dtype);
        const Tensor labels = labels_for(rows, classes);
        const auto [want_loss, want_grad] = loss_and_grad(logits, [&](const Tensor& x) { return composite(x, labels, reduction); });
        const auto [loss, grad] = loss_and_grad(logits, [&](const Tensor& x) { return fused(x, labels, reduction); });
        expect_same_bits(loss, want_loss);
        expect_same_bits(grad, want_grad);
      }
    }
  }
}

// Under bfloat16 autocast the fused op reads the 16-bit logits itself (float32 losses, a bfloat16
// gradient), as log_softmax's widening form did.
TEST(CrossEntropy, AutocastWidensTheBFloat16Logits) {
  flow::manual_seed(22);
  const Tensor logits = (flow::randn({9, 3001}) * 3).to(flow::kBFloat16);
  const Tensor labels = labels_for(9, 3001);
  const auto run = [&](bool use_fused) {
    return loss_and_grad(logits, [&](const Tensor& x) {
      flow::autocast guard(flow::kBFloat16);
      return use_fused ? fused(x, labels, F::Reduction::kMean) : composite(x, labels, F::Reduction::kMean);
    });
  };
  const auto [want_loss, want_grad] = run(false);
  const auto [loss, grad] = run(true);
  EXPECT_EQ(loss.dtype(), flow::kFloat32);
  EXPECT_EQ(grad.dtype(), flow::kBFloat16);
  expect_same_bits(loss, want_loss);
  expect_same_bits(grad, want_grad);
}

// The bfloat16 gradient rows (AVX-512 or portable) round denormal and NaN values as the composite's
// BFloat16(float) does.
TEST(CrossEntropy, BFloat16GradientsOfTinyAndNaNProbabilitiesHaveTheCompositeBits) {
  const int64_t classes = 4099;
  std::vector<float> values(static_cast<size_t>(3 * classes));
  for (int64_t j = 0; j < classes; ++j) {
    // Row 0 falls from 0 to -120: its smallest probabilities, scaled, are denormal.
    values[static_cast<size_t>(j)] = -120.0f * static_cast<float>(j) / static_cast<float>(classes - 1);
    values[static_cast<size_t>(classes + j)] = static_cast<float>(j % 17) * 0.25f;
    values[static_cast<size_t>(2 * classes + j)] = static_cast<float>((j * 31) % 23) * -4.0f;
  }
  values[static_cast<size_t>(classes + 100)] = std::numeric_limits<float>::quiet_NaN();  // row 1 is all NaN
  const Tensor logits = flow::tensor(values, Shape{3, classes}).to(flow::kBFloat16);
  const Tensor labels = flow::tensor<int64_t>({5, 7, 4098}, Shape{3});
  const auto run = [&](bool use_fused) {
    return loss_and_grad(logits, [&](const Tensor& x) {
      flow::autocast guard(flow::kBFloat16);
      // Scaled down so that the smallest probabilities' gradients land below float32's normals.
      return (use_fused ? fused(x, labels, F::Reduction::kSum) : composite(x, labels, F::Reduction::kSum)) * 1e-3;
    }).second;
  };
  const auto raw = [](const Tensor& t) {
    std::vector<uint16_t> bits(static_cast<size_t>(t.numel()));
    std::memcpy(bits.data(), t.contiguous().data_ptr(), bits.size() * sizeof(uint16_t));
    return bits;
  };
  const std::vector<uint16_t> fused_bits = raw(run(true)), composite_bits = raw(run(false));
  EXPECT_EQ(fused_bits, composite_bits);
  const auto denormal = [](uint16_t b) { return (b & 0x7f80) == 0 && (b & 0x007f) != 0; };
  EXPECT_TRUE(std::any_of(composite_bits.begin(), composite_bits.end(), denormal)) << "row 0 should reach bfloat16's denormals";
}

TEST(CrossEntropy, UnbatchedInputAndAllRowsIgnored) {
  const Tensor logits = flow::tensor<double>({1, 2, 3});
  EXPECT_NEAR(F::cross_entropy(logits, flow::tensor<int64_t>(std::vector<int64_t>{2}, Shape{})).item<double>(),
              std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 3.0, 1e-12);
  const Tensor ignored = F::cross_entropy(flow::randn({2, 3}), flow::full({2}, kIgnored, flow::kInt64),
                                          F::CrossEntropyLossOptions().ignore_index(kIgnored).reduction(F::Reduction::kNone));
  EXPECT_EQ(ignored.tolist<float>(), (std::vector<float>{0, 0}));
}

TEST(CrossEntropy, FirstAndSecondDerivatives) {
  flow::manual_seed(23);
  const Tensor labels = flow::tensor<int64_t>({2, kIgnored, 0, 4}, Shape{4});
  EXPECT_TRUE(flow::testing::gradcheck(
      [&labels](const TensorList& in) { return flow::sparse_softmax_cross_entropy(in[0] * 3.0, labels, kIgnored); },
      {flow::testing::grad_input({4, 5})}));
  // The gradient op's own gradient, with respect to the logits and to the incoming gradient.
  EXPECT_TRUE(flow::testing::gradcheck(
      [&labels](const TensorList& in) {
        const Tensor losses = flow::sparse_softmax_cross_entropy(in[0] * in[0], labels, kIgnored);
        return flow::autograd::grad({flow::sum(losses * in[1])}, {in[0]}, {}, false, /*create_graph=*/true)[0];
      },
      {flow::testing::grad_input({4, 5}), flow::testing::grad_input({4})}));
}

TEST(CrossEntropy, ChecksItsArguments) {
  const Tensor logits = flow::randn({2, 3});
  EXPECT_THROW_MSG(flow::sparse_softmax_cross_entropy(logits, flow::tensor<int64_t>({0, 3}), kIgnored),
                   "[sparse_softmax_cross_entropy] label 3 of row 1 is outside [0, 3) and is not ignore_index (-100)");
  EXPECT_THROW_MSG(flow::sparse_softmax_cross_entropy(logits, flow::tensor<int64_t>({0, -1}), kIgnored), "label -1 of row 1");
  EXPECT_THROW_MSG(flow::sparse_softmax_cross_entropy(logits, flow::tensor<int32_t>({0, 1}), kIgnored),
                   "[sparse_softmax_cross_entropy] expects int64 labels, got int32");
  EXPECT_THROW_MSG(flow::sparse_softmax_cross_entropy(logits, flow::tensor<int64_t>({0, 1, 2}), kIgnored),
                   "[sparse_softmax_cross_entropy] expects labels of shape (2,), got (3,)");
  EXPECT_THROW_MSG(flow::sparse_softmax_cross_entropy(flow::randn({2, 3, 4}), flow::tensor<int64_t>({0, 1}), kIgnored),
                   "[sparse_softmax_cross_entropy] expects logits of shape (N, C), got (2,3,4)");
  EXPECT_THROW_MSG(flow::sparse_softmax_cross_entropy(flow::zeros({2, 3}, flow::kInt64), flow::tensor<int64_t>({0, 1}), kIgnored),
                   "[sparse_softmax_cross_entropy]");
}
