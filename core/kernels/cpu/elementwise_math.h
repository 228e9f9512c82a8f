#pragma once
// Scalar functions of the element-wise ops, shared by their own kernels (unary.cpp, binary.cpp)
// and by the fused element-wise kernel (fused.cpp), so a fused chain rounds exactly like the ops
// it replaces.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/error.h"

namespace flow::cpu::math {

// Integer +, - and * wrap around (two's complement), as PyTorch's do in practice; C++ leaves
// signed overflow undefined, so integers compute in uint64_t and convert back (modular in C++20).
template <typename T>
inline constexpr bool kWraps = std::is_integral_v<T> && !std::is_same_v<T, bool>;
template <typename T>
T add(T a, T b) {
  if constexpr (kWraps<T>) return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  else return a + b;
}
template <typename T>
T sub(T a, T b) {
  if constexpr (kWraps<T>) return static_cast<T>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
  else return a - b;
}
template <typename T>
T mul(T a, T b) {
  if constexpr (kWraps<T>) return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  else return a * b;
}

template <typename T>
T neg(T x) {
  if constexpr (kWraps<T>) return sub(T(0), x);
  else return static_cast<T>(-x);
}
template <typename T>
T abs(T x) {
  if constexpr (std::is_unsigned_v<T>) return x;
  else return x < 0 ? neg(x) : x;
}
template <typename T>
T sign(T x) {
  return static_cast<T>((T(0) < x) - (x < T(0)));
}
// `x < 0 ? 0 : x` keeps NaN, as PyTorch's relu does, and vectorises to a blend.
template <typename T>
T relu(T x) {
  return x < T(0) ? T(0) : x;
}
template <typename T>
T relu_grad(T grad, T output) {
  return output > T(0) ? grad : T(0);
}
template <typename T>
T rsqrt(T x) {
  return T(1) / std::sqrt(x);
}

// float32 e^x with no libm call, so the loops over it vectorise (libm's expf is a call per element): e^x = 2^k e^r with k
// the nearest integer to x / ln 2 (|r| <= ln 2 / 2) and e^r its degree-7 Taylor polynomial
// (truncation error below 3e-9). Below -86 it gives 0 (the true value is under 5e-38); above
// float's range, inf; NaN stays NaN.
[[gnu::always_inline]] inline float exp_float(float x) {
  // Every comparison is made unconditionally, one select each: GCC then vectorises the loop
  // (it does not speculate a comparison that the source only makes on some path).
  const bool is_nan = x != x, underflows = x < -86.0f, overflows = x > 88.7f;
  float clamped = is_nan ? 0.0f : x;
  clamped = underflows ? -86.0f : clamped;
  clamped = overflows ? 88.7f : clamped;
  constexpr float kRoundingShift = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float k = (clamped * 1.44269504088896341f + kRoundingShift) - kRoundingShift;
  const float r = (clamped - k * 0.693359375f) - k * -2.12194440e-4f;  // ln 2 in two parts
  const float p =
      ((((((r * (1.0f / 5040) + 1.0f / 720) * r + 1.0f / 120) * r + 1.0f / 24) * r + 1.0f / 6) * r + 0.5f) * r + 1.0f) * r + 1.0f;
  // 2^(k-1) * 2: k reaches 128 at the top of the range, one past the largest exponent.
  const float scale = std::bit_cast<float>((static_cast<int32_t>(k) + 126) << 23);
  float result = p * scale * 2.0f;
  result = underflows ? 0.0f : result;
  result = overflows ? std::numeric_limits<float>::infinity() : result;
  return is_nan ? x : result;
}

// float32 2 * Phi(x) = erfc(-x / sqrt 2) = 1 + erf(x / sqrt 2), the GELU's doubled normal CDF,
// with relative error about 1e-7 everywhere (no cancellation for negative x, where GELU's value
// is tiny): erfc(z) for z >= 0 by the Chebyshev fit t e^(-z^2 + P(t)), t = 1 / (1 + z/2),
// published with fractional error below 1.2e-7 (Numerical Recipes, erfcc).
[[gnu::always_inline]] inline float twice_normal_cdf(float x) {
  const float u = x * 0.7071067811865476f;
  const float z = u < 0.0f ? -u : u;
  const float t = 1.0f / (1.0f + 0.5f * z);
  float poly = 0.17087277f * t - 0.82215223f;
  poly = poly * t + 1.48851587f;
  poly = poly * t - 1.13520398f;
  poly = poly * t + 0.27886807f;
  poly = poly * t - 0.18628806f;
  poly = poly * t + 0.09678418f;
  poly = poly * t + 0.37409196f;
  poly = poly * t + 1.00002368f;
  poly = poly * t - 1.26551223f;
  const float erfc_z = t * exp_float(poly - z * z);
  return u >= 0.0f ? 2.0f - erfc_z : erfc_z;
}

// Always inlined: the element loops calling them vectorise only when they are.
template <typename T>
[[gnu::always_inline]] inline T exp(T x) {
  if constexpr (std::is_same_v<T, float>) return exp_float(x);
  else return std::exp(x);
}
template <typename T>
[[gnu::always_inline]] inline T sigmoid(T x) {
  return T(1) / (T(1) + exp(-x));
}
template <typename T>
[[gnu::always_inline]] inline T silu(T x) {
  return x / (T(1) + exp(-x));
}

// GELU's tanh form: 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3); the
// sigmoid needs one exp (vectorised for float32) where tanh would call libm.
template <typename T>
[[gnu::always_inline]] inline T gelu_tanh_inner(T x) {
  return T(0.7978845608028654) * (x + T(0.044715) * x * x * x);
}

template <typename T>
[[gnu::always_inline]] inline T gelu(T x, bool tanh_form) {
  if (tanh_form) return x * sigmoid(T(2) * gelu_tanh_inner(x));
  if constexpr (std::is_same_v<T, float>) return 0.5f * x * twice_normal_cdf(x);
  else return T(0.5) * x * (T(1) + std::erf(x * T(0.7071067811865476)));
}

template <typename T>
[[gnu::always_inline]] inline T gelu_derivative(T x, bool tanh_form) {
  if (tanh_form) {
    // With s = sigmoid(2u): 0.5 (1 + tanh u) = s and 1 - tanh^2 u = 4 s (1 - s).
    const T s = sigmoid(T(2) * gelu_tanh_inner(x));
    return s + T(2) * x * s * (T(1) - s) * T(0.7978845608028654) * (T(1) + T(3 * 0.044715) * x * x);
  }
  if constexpr (std::is_same_v<T, float>) {
    return 0.5f * twice_normal_cdf(x) + x * exp_float(-0.5f * x * x) * 0.3989422804014327f;
  } else {
    const T cdf = T(0.5) * (T(1) + std::erf(x * T(0.7071067811865476)));
    const T pdf = std::exp(T(-0.5) * x * x) * T(0.3989422804014327);
    return cdf + x * pdf;
  }
}

// NaN stays NaN: both comparisons are false.
template <typename T>
T clamp(T x, T lo, T hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}

template <typename T>
T power(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
    T result = 1;
    for (; b > 0; b >>= 1, a = mul(a, a)) {
      if (b & 1) result = mul(result, a);
    }
    return result;
  } else {
    return std::pow(a, b);
  }
}

template <typename T>
T divide(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (b == 0) fail("div", "integer division by zero");
    if constexpr (std::is_signed_v<T>) {
      if (b == -1) return neg(a);  // the lowest value divided by -1 overflows (and traps on x86)
    }
  }
  return a / b;
}

// NaN propagates through maximum/minimum, as in PyTorch.
template <typename T>
T max_of(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  }
  return a < b ? b : a;
}
template <typename T>
T min_of(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  }
  return b < a ? b : a;
}

}  // namespace flow::cpu::math
