#pragma once
// Naive double-precision references for op tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "core/flow.h"

namespace flow::testing {

inline std::vector<double> values(const Tensor& t) { return t.to(kFloat64).contiguous().tolist<double>(); }

// Element offset into a (contiguous) tensor of `shape` for an output multi-index, broadcasting.
inline int64_t broadcast_offset(const Shape& shape, const Shape& out, int64_t linear) {
  const Strides strides = contiguous_strides(shape);
  int64_t offset = 0;
  for (int64_t d = out.ndim() - 1; d >= 0; --d) {
    const int64_t i = linear % out[d];
    linear /= out[d];
    const int64_t sd = d - (out.ndim() - shape.ndim());
    if (sd >= 0 && shape[sd] != 1) offset += i * strides[sd];
  }
  return offset;
}

inline Tensor reference_binary(const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f) {
  const Shape out = broadcast_shapes(a.shape(), b.shape(), "reference");
  const auto va = values(a), vb = values(b);
  std::vector<double> result(static_cast<size_t>(out.numel()));
  for (int64_t i = 0; i < out.numel(); ++i) {
    result[i] = f(va[broadcast_offset(a.shape(), out, i)], vb[broadcast_offset(b.shape(), out, i)]);
  }
  return tensor(result, out);
}

inline Tensor reference_unary(const Tensor& a, const std::function<double(double)>& f) {
  auto v = values(a);
  for (auto& x : v) x = f(x);
  return tensor(v, a.shape());
}

// Expects equal shapes and values within atol + rtol * |expected| (NaN matches NaN).
inline void expect_close(const Tensor& actual, const Tensor& expected, double rtol = 1e-5, double atol = 1e-6) {
  ASSERT_EQ(actual.shape(), expected.shape());
  const auto a = values(actual), e = values(expected);
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(e[i])) {
      EXPECT_TRUE(std::isnan(a[i])) << "element " << i;
    } else if (std::isinf(e[i])) {
      EXPECT_EQ(a[i], e[i]) << "element " << i;
    } else {
      EXPECT_NEAR(a[i], e[i], atol + rtol * std::abs(e[i])) << "element " << i;
    }
  }
}

// Expects the same dtype, shape and bytes (NaN payloads and the signs of zeros included): for
// kernels that must reproduce another computation bit for bit.
inline void expect_same_bytes(const Tensor& actual, const Tensor& expected) {
  ASSERT_EQ(actual.dtype(), expected.dtype());
  ASSERT_EQ(actual.shape(), expected.shape());
  const Tensor a = actual.contiguous(), e = expected.contiguous();
  EXPECT_EQ(std::memcmp(a.data_ptr(), e.data_ptr(), static_cast<size_t>(a.numel()) * itemsize(a.dtype())), 0);
}

// A bfloat16 product (matmul, linear, convolution) against the float32 product of the same rounded
// operands: both accumulate in float32 and round once, in the same order where flow computes it in
// float32 (AVX2), in oneDNN's order where the CPU multiplies bfloat16 (AVX512-BF16, AMX). Within a
// rounding, plus what another summation order moves near zero.
inline void expect_bfloat16_product(const Tensor& actual, const Tensor& wide_expected) {
  ASSERT_EQ(actual.dtype(), kBFloat16);
  double scale = 0;
  for (double v : values(wide_expected)) scale = std::max(scale, std::abs(v));
  expect_close(actual, wide_expected, std::ldexp(1.0, -7), 1e-3 * scale);
}

// Shapes pairs exercising broadcasting, size-1 and empty dims.
inline std::vector<std::pair<Shape, Shape>> broadcast_cases() {
  return {{{7}, {7}},           {{3, 4}, {3, 4}},   {{3, 4}, {4}},     {{3, 1}, {1, 4}}, {{2, 3, 4}, {3, 1}},
          {{}, {2, 3}},         {{0, 3}, {3}},      {{1}, {5, 1, 2}}, {{300, 257}, {257}}};
}

// Attention with ordinary ops: softmax(q k^T * scale + mask) v, mask bool (true takes part) or
// additive, causal: query i sees keys j <= i; rows that see no key give zeros.
inline Tensor reference_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal, double scale) {
  Tensor scores = matmul(q, k.transpose(-2, -1)) * scale;
  Tensor allowed;
  if (causal) allowed = ge(arange(q.size(-2)).unsqueeze(1), arange(k.size(-2)).unsqueeze(0));
  if (mask.defined() && mask.dtype() == kBool) allowed = mask;
  if (mask.defined() && mask.dtype() != kBool) scores = scores + mask;
  if (allowed.defined()) scores = masked_fill(scores, logical_not(allowed), -INFINITY);
  const Tensor none = eq(max(scores, -1, true).values, -INFINITY);
  return matmul(masked_fill(softmax(scores, -1), none, 0.0), v);
}

}  // namespace flow::testing
