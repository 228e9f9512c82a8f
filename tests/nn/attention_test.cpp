// scaled_dot_product_attention: the fused kernel (flash_attention) against the composite formula
// in float64, through the gradient checker, in bfloat16, with dropout, and its errors. In a
// Graph: tests/graph/attention_graph_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "autograd/engine.h"
#include "common/gradcheck.h"
#include "common/reference.h"
#include "common/test_util.h"
#include "nn/functional.h"

using flow::Shape;
using flow::Tensor;
using flow::TensorList;
using flow::testing::expect_close;
using flow::testing::gradcheck;
namespace F = flow::nn::functional;

namespace {

struct Case {
  const char* name;
  Shape q, k, v;
  bool causal;
  Shape mask;  // 0-d: none
  bool bool_mask;
};

// Sizes cross the kernel's 64-row and 64-key tiles, with L != S and E != Ev.
const std::vector<Case> kCases = {
    {"plain", {2, 3, 5, 8}, {2, 3, 7, 8}, {2, 3, 7, 4}, false, {}, false},
    {"odd_sizes_over_tiles", {1, 2, 70, 12}, {1, 2, 130, 12}, {1, 2, 130, 20}, false, {}, false},
    {"causal_square", {2, 2, 67, 8}, {2, 2, 67, 8}, {2, 2, 67, 8}, true, {}, false},
    {"causal_more_keys", {1, 1, 9, 4}, {1, 1, 140, 4}, {1, 1, 140, 6}, true, {}, false},
    {"causal_fewer_keys", {1, 2, 80, 4}, {1, 2, 10, 4}, {1, 2, 10, 4}, true, {}, false},
    {"bool_mask_broadcast", {2, 3, 6, 4}, {2, 3, 9, 4}, {2, 3, 9, 5}, false, {6, 9}, true},
    {"additive_mask_per_batch", {2, 3, 6, 4}, {2, 3, 9, 4}, {2, 3, 9, 5}, false, {2, 1, 6, 9}, false},
    {"no_batch_dims", {5, 4}, {6, 4}, {6, 3}, false, {}, false},
    // Up to 4 query rows take the few-query path (dot products, no BLAS): head dims off the
    // 16-lane steps, masks that hide whole rows, causal with more and fewer keys than rows.
    {"one_query", {3, 2, 1, 13}, {3, 2, 97, 13}, {3, 2, 97, 11}, false, {}, false},
    {"few_queries_bool_mask_per_batch", {3, 2, 3, 19}, {3, 2, 37, 19}, {3, 2, 37, 7}, false, {3, 1, 3, 37}, true},
    {"few_queries_additive_mask", {2, 2, 4, 32}, {2, 2, 70, 32}, {2, 2, 70, 5}, false, {2, 2, 4, 70}, false},
    {"few_queries_causal_more_keys", {2, 2, 4, 9}, {2, 2, 6, 9}, {2, 2, 6, 9}, true, {}, false},
    {"few_queries_causal_fewer_keys", {1, 1, 4, 5}, {1, 1, 2, 5}, {1, 1, 2, 3}, true, {}, false},
    {"one_query_no_batch_dims", {1, 4}, {6, 4}, {6, 3}, false, {}, false},
};

Tensor make_mask(const Case& c, flow::DType dtype) {
  if (c.mask.ndim() == 0) return Tensor();
  if (c.bool_mask) {
    // Row 2 sees nothing: it must come out as zeros.
    const Tensor row = flow::arange(c.mask[c.mask.ndim() - 2]).unsqueeze(1);
    return flow::logical_and(flow::lt(flow::rand(c.mask, flow::kFloat64), 0.7), flow::ne(row, 2));
  }
  return flow::randn(c.mask, dtype);
}

class SdpaCase : public ::testing::TestWithParam<Case> {};

TEST_P(SdpaCase, FusedForwardAndBackwardEqualTheCompositeInFloat64) {
  const Case& c = GetParam();
  flow::manual_seed(1);
  Tensor q = flow::randn(c.q, flow::kFloat64).requires_grad_(true);
  Tensor k = flow::randn(c.k, flow::kFloat64).requires_grad_(true);
  Tensor v = flow::randn(c.v, flow::kFloat64).requires_grad_(true);
  const Tensor mask = make_mask(c, flow::kFloat64);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.q[c.q.ndim() - 1]));
  const Tensor fused = F::scaled_dot_product_attention(q, k, v, mask, 0.0, c.causal);
  const Tensor expected = flow::testing::reference_attention(q, k, v, mask, c.causal, scale);
  expect_close(fused, expected, 1e-10, 1e-12);
  const Tensor weights = flow::randn(fused.shape(), flow::kFloat64);
  const TensorList fused_grads = flow::autograd::grad({flow::sum(fused * weights)}, {q, k, v});
  const TensorList expected_grads = flow::autograd::grad({flow::sum(expected * weights)}, {q, k, v});
  for (size_t i = 0; i < 3; ++i) expect_close(fused_grads[i], expected_grads[i], 1e-9, 1e-11);
}

TEST_P(SdpaCase, Float32MatchesFloat64) {
  const Case& c = GetParam();
  flow::manual_seed(2);
  const Tensor q = flow::randn(c.q, flow::kFloat64), k = flow::randn(c.k, flow::kFloat64), v = flow::randn(c.v, flow::kFloat64);
  const Tensor mask = make_mask(c, flow::kFloat64);
  const Tensor mask32 = mask.defined() && mask.dtype() != flow::kBool ? mask.to(flow::kFloat32) : mask;
  const Tensor wide = flow::flash_attention(q, k, v, mask, c.causal);
  expect_close(flow::flash_attention(q.to(flow::kFloat32), k.to(flow::kFloat32), v.to(flow::kFloat32), mask32, c.causal), wide, 1e-5,
               1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SdpaCase, ::testing::ValuesIn(kCases), [](const auto& info) { return std::string(info.param.name); });

TEST(ScaledDotProductAttention, PassesTheGradientChecker) {
  flow::manual_seed(3);
  const Tensor mask = flow::randn({4, 6}, flow::kFloat64);
  for (bool causal : {false, true}) {
    TensorList inputs{flow::randn({2, 4, 3}, flow::kFloat64).requires_grad_(true), flow::randn({2, 6, 3}, flow::kFloat64).requires_grad_(true),
                      flow::randn({2, 6, 5}, flow::kFloat64).requires_grad_(true)};
    EXPECT_TRUE(gradcheck(
        [&](const TensorList& in) { return F::scaled_dot_product_attention(in[0], in[1], in[2], causal ? Tensor() : mask, 0.0, causal, 0.7); },
        inputs));
  }
}

TEST(ScaledDotProductAttention, Bfloat16StaysWithinItsPrecisionOfFloat32) {
  flow::manual_seed(4);
  Tensor q = flow::randn({2, 2, 70, 16}), k = flow::randn({2, 2, 70, 16}), v = flow::randn({2, 2, 70, 16});
  Tensor qb = q.to(flow::kBFloat16).requires_grad_(true), kb = k.to(flow::kBFloat16).requires_grad_(true),
         vb = v.to(flow::kBFloat16).requires_grad_(true);
  q = qb.detach().to(flow::kFloat32).requires_grad_(true);
  k = kb.detach().to(flow::kFloat32).requires_grad_(true);
  v = vb.detach().to(flow::kFloat32).requires_grad_(true);
  const Tensor low = F::scaled_dot_product_attention(qb, kb, vb, Tensor(), 0.0, true);
  const Tensor high = F::scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true);
  EXPECT_EQ(low.dtype(), flow::kBFloat16);
  expect_close(low, high, 1e-2, 1e-2);
  flow::sum(low).backward();
  flow::sum(high).backward();
  expect_close(qb.grad(), q.grad(), 2e-2, 2e-2);
  expect_close(kb.grad(), k.grad(), 2e-2, 2e-2);
  expect_close(vb.grad(), v.grad(), 2e-2, 2e-2);
}

TEST(ScaledDotProductAttention, ARowThatSeesNoKeyGivesZerosAndNoGradient) {
  Tensor q = flow::randn({1, 3, 4}).requires_grad_(true);
  Tensor k = flow::randn({1, 5, 4}).requires_grad_(true);
  Tensor v = flow::randn({1, 5, 2}).requires_grad_(true);
  const Tensor mask = flow::ne(flow::arange(3).unsqueeze(1), 1).expand({3, 5});
  const Tensor out = F::scaled_dot_product_attention(q, k, v, mask);
  EXPECT_EQ(flow::testing::values(out.select(1, 1)), std::vector<double>(2, 0.0));
  flow::sum(out).backward();
  EXPECT_EQ(flow::testing::values(q.grad().select(1, 1)), std::vector<double>(4, 0.0));
  for (double g : flow::testing::values(q.grad())) EXPECT_TRUE(std::isfinite(g));
}

TEST(ScaledDotProductAttention, FusedDropoutKeepsOrScalesEachWeightAndIsSeeded) {
  flow::manual_seed(5);
  // With value = identity the output is the dropped weights themselves: each is either 0 or the
  // softmax weight over 1 - p, and about p of them are 0.
  constexpr int64_t kLength = 70, kKeys = 90;
  constexpr double kP = 0.25;
  const Tensor q = flow::randn({2, 3, kLength, 8}, flow::kFloat64), k = flow::randn({2, 3, kKeys, 8}, flow::kFloat64);
  const Tensor eye = flow::eye(kKeys, std::nullopt, flow::kFloat64).expand({2, 3, kKeys, kKeys});
  flow::manual_seed(7);
  const Tensor dropped = F::scaled_dot_product_attention(q, k, eye, Tensor(), kP);
  const Tensor weights = flow::softmax(flow::matmul(q, k.transpose(-2, -1)) / std::sqrt(8.0), -1);
  const auto got = flow::testing::values(dropped), expected = flow::testing::values(weights);
  int64_t zeros = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == 0) {
      ++zeros;
    } else {
      EXPECT_NEAR(got[i], expected[i] / (1 - kP), 1e-12) << i;
    }
  }
  EXPECT_NEAR(static_cast<double>(zeros) / static_cast<double>(got.size()), kP, 0.01);
  // The same seed draws the same weights.
  flow::manual_seed(7);
  expect_close(F::scaled_dot_product_attention(q, k, eye, Tensor(), kP), dropped, 0, 0);
  // Dropping every weight leaves nothing (the composite formula: the kernel takes p < 1).
  EXPECT_EQ(flow::testing::values(F::scaled_dot_product_attention(q, k, eye, Tensor(), 1.0)), std::vector<double>(got.size(), 0.0));
}

TEST(ScaledDotProductAttention, FusedDropoutPassesTheGradientChecker) {
  flow::manual_seed(8);
  for (bool causal : {false, true}) {
    TensorList inputs{flow::randn({2, 5, 3}, flow::kFloat64).requires_grad_(true), flow::randn({2, 7, 3}, flow::kFloat64).requires_grad_(true),
                      flow::randn({2, 7, 4}, flow::kFloat64).requires_grad_(true)};
    // Reseeded on every evaluation: the finite differences see one fixed dropout mask.
    EXPECT_TRUE(gradcheck(
        [&](const TensorList& in) {
          flow::manual_seed(9);
          return F::scaled_dot_product_attention(in[0], in[1], in[2], Tensor(), 0.3, causal);
        },
        inputs));
  }
}

// A decode step: one or two new tokens per row over a KV cache narrowed to the positions in use,
// rows of different lengths (a bool mask of per-row lengths), float32 against the float64
// composite. Cache positions past a row's length hold huge values that the mask must hide.
TEST(ScaledDotProductAttention, DecodeStepOverPerRowLengthsMatchesTheComposite) {
  flow::manual_seed(12);
  constexpr int64_t kRows = 5, kHeads = 3, kCache = 50, kUsed = 41, kHeadDim = 24;
  const Tensor lengths = flow::tensor<int64_t>({41, 1, 17, 33, 40});
  const Tensor free_positions = flow::ge(flow::arange(kCache).reshape({1, 1, kCache, 1}), lengths.reshape({kRows, 1, 1, 1}));
  const Tensor cache_k = flow::where(free_positions, 1e30, flow::randn({kRows, kHeads, kCache, kHeadDim}));
  const Tensor cache_v = flow::where(free_positions, 1e30, flow::randn({kRows, kHeads, kCache, kHeadDim}));
  const Tensor k = cache_k.slice(2, 0, kUsed), v = cache_v.slice(2, 0, kUsed);
  const Tensor visible = flow::lt(flow::arange(kUsed).reshape({1, 1, 1, kUsed}), lengths.reshape({kRows, 1, 1, 1}));
  for (int64_t queries : {1, 2}) {
    const Tensor q = flow::randn({kRows, queries, kHeads, kHeadDim}).permute({0, 2, 1, 3});
    const Tensor got = F::scaled_dot_product_attention(q, k, v, visible);
    const Tensor hidden_zeroed = flow::where(visible.transpose(-2, -1), k, 0.0);
    const Tensor expected = flow::testing::reference_attention(q.to(flow::kFloat64), hidden_zeroed.to(flow::kFloat64),
                                                               flow::where(visible.transpose(-2, -1), v, 0.0).to(flow::kFloat64), visible,
                                                               false, 1.0 / std::sqrt(static_cast<double>(kHeadDim)));
    expect_close(got, expected, 1e-5, 1e-5);
  }
}

// Dropout's weight (b, i, j) reads the same Philox word on either path: row 0 of one batch element
// is element j of the weights whether the call has 1 query row (few-query path) or 70 (tiled).
TEST(ScaledDotProductAttention, FewQueryDropoutDrawsTheTiledPathsWeights) {
  flow::manual_seed(13);
  const Tensor q = flow::randn({1, 1, 70, 8}, flow::kFloat64), k = flow::randn({1, 1, 90, 8}, flow::kFloat64),
               v = flow::randn({1, 1, 90, 6}, flow::kFloat64);
  flow::manual_seed(14);
  const Tensor tiled = F::scaled_dot_product_attention(q, k, v, Tensor(), 0.4);
  flow::manual_seed(14);
  const Tensor few = F::scaled_dot_product_attention(q.slice(2, 0, 1), k, v, Tensor(), 0.4);
  expect_close(few, tiled.slice(2, 0, 1), 1e-12, 1e-12);
}

// The forward kernel reads batch-strided inputs in place (a KV cache narrowed to the positions in
// use, a permuted one-row query) and copies the others (a permuted query of several rows).
TEST(ScaledDotProductAttention, StridedInputsEqualContiguousOnes) {
  flow::manual_seed(4);
  const Tensor cache_k = flow::randn({2, 3, 10, 8}), cache_v = flow::randn({2, 3, 10, 8});
  const Tensor k = cache_k.slice(2, 0, 6), v = cache_v.slice(2, 0, 6);
  ASSERT_FALSE(k.is_contiguous());
  const Tensor mask = flow::le(flow::arange(6).reshape({1, 1, 1, 6}), flow::tensor<int64_t>({4, 5}).reshape({2, 1, 1, 1}));
  for (int64_t rows : {1, 4}) {
    const Tensor q = flow::randn({2, rows, 3, 8}).permute({0, 2, 1, 3});
    const Tensor expected = F::scaled_dot_product_attention(q.contiguous(), k.contiguous(), v.contiguous(), mask);
    expect_close(F::scaled_dot_product_attention(q, k, v, mask), expected, 0, 0);
  }
}

TEST(ScaledDotProductAttention, BadArgumentsFailAtTheCall) {
  const Tensor q = flow::randn({2, 4, 8}), k = flow::randn({2, 6, 8}), v = flow::randn({2, 6, 3});
  EXPECT_THROW_MSG(F::scaled_dot_product_attention(q, flow::randn({2, 6, 7}), v), "[scaled_dot_product_attention] key's last dim (7)");
  EXPECT_THROW_MSG(F::scaled_dot_product_attention(q, k, flow::randn({2, 5, 3})), "value has 5 positions but key has 6");
  EXPECT_THROW_MSG(F::scaled_dot_product_attention(q, flow::randn({3, 6, 8}), v), "need the same batch dims");
  EXPECT_THROW_MSG(F::scaled_dot_product_attention(q, k, v, flow::randn({4, 5})), "does not broadcast to the scores' shape (2,4,6)");
  EXPECT_THROW_MSG(F::scaled_dot_product_attention(q, k, v, flow::zeros({4, 6}), 0.0, true), "either attn_mask or is_causal");
  EXPECT_THROW_MSG(F::scaled_dot_product_attention(q, k, v, flow::zeros({4, 6}), 0.1, true), "either attn_mask or is_causal");
  EXPECT_THROW_MSG(F::scaled_dot_product_attention(q, k, v, Tensor(), 1.5), "dropout_p has to be between 0 and 1");
  EXPECT_THROW_MSG(F::scaled_dot_product_attention(q.to(flow::kInt64), k.to(flow::kInt64), v.to(flow::kInt64)), "[scaled_dot_product_attention]");
  Tensor mask = flow::zeros({4, 6}).requires_grad_(true);
  const Tensor out = F::scaled_dot_product_attention(q, k, v, mask);
  EXPECT_THROW_MSG(flow::sum(out).backward(), "no gradient for attn_mask");
}

}  // namespace
