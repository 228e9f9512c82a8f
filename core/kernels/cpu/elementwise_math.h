#pragma once
// Scalar functions of the element-wise ops, shared by their own kernels (unary.cpp, binary.cpp)
// and by the fused element-wise kernel (fused.cpp), so a fused chain rounds exactly like the ops
// it replaces.
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/error.h"

namespace flow::cpu::math {

template <typename T>
T neg(T x) {
  return static_cast<T>(-x);
}
template <typename T>
T abs(T x) {
  if constexpr (std::is_unsigned_v<T>) return x;
  else return static_cast<T>(x < 0 ? -x : x);
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
template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}
template <typename T>
T silu(T x) {
  return x / (T(1) + std::exp(-x));
}

template <typename T>
T gelu(T x, bool tanh_form) {
  if (tanh_form) {
    const T inner = T(0.7978845608028654) * (x + T(0.044715) * x * x * x);
    return T(0.5) * x * (T(1) + std::tanh(inner));
  }
  return T(0.5) * x * (T(1) + std::erf(x * T(0.7071067811865476)));
}

template <typename T>
T gelu_derivative(T x, bool tanh_form) {
  if (tanh_form) {
    const T k = T(0.7978845608028654);
    const T inner = k * (x + T(0.044715) * x * x * x);
    const T t = std::tanh(inner);
    return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3 * 0.044715) * x * x);
  }
  const T cdf = T(0.5) * (T(1) + std::erf(x * T(0.7071067811865476)));
  const T pdf = std::exp(T(-0.5) * x * x) * T(0.3989422804014327);
  return cdf + x * pdf;
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
    for (; b > 0; b >>= 1, a *= a) {
      if (b & 1) result *= a;
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
