// Device code of the element-wise ops with parameters or operand dtypes of their own (sign,
// softplus, clamp, gelu_grad, the logical ops, masked_fill, binary_cross_entropy), mostly over
// map.cuh's launchers. Each functor follows the CPU kernel's formula (core/kernels/cpu/unary.cpp, elementwise_math.h,
// binary.cpp, index.cpp), so NaN and the bounds behave as there.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/kernels/cuda/grid.cuh"
#include "core/kernels/cuda/launch.h"
#include "core/kernels/cuda/map.cuh"

namespace flow::cuda {
namespace {

// What Scalar::to<T>() gives on the host.
template <typename T>
__host__ __device__ T scalar_as(ScalarArg s) {
  if constexpr (is_reduced_v<T>) return T(static_cast<float>(s.real));
  else if constexpr (std::is_floating_point_v<T>) return static_cast<T>(s.real);
  else return static_cast<T>(s.integer);
}

template <typename T>
struct SignFn {
  __device__ T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) return static_cast<T>(T(0) < x);
    else return static_cast<T>((T(0) < x) - (x < T(0)));
  }
};

template <typename T>
struct SoftplusFn {
  T beta, threshold;
  __device__ T operator()(T x) const { return x * beta > threshold ? x : log1p(exp(x * beta)) / beta; }
};

template <typename T>
struct ClampFn {
  T lo, hi;
  __device__ T operator()(T x) const { return x < lo ? lo : (x > hi ? hi : x); }
};

// GELU's derivative as the CPU writes it: the tanh form through sigmoid(2u), the erf form as
// Phi(x) + x phi(x).
template <typename C>
__device__ C gelu_derivative(C x, bool tanh_form) {
  if (tanh_form) {
    const C u = C(0.7978845608028654) * (x + C(0.044715) * x * x * x);
    const C s = C(1) / (C(1) + exp(C(-2) * u));
    return s + C(2) * x * s * (C(1) - s) * C(0.7978845608028654) * (C(1) + C(3 * 0.044715) * x * x);
  }
  const C cdf = C(0.5) * (C(1) + erf(x * C(0.7071067811865476)));
  const C pdf = exp(C(-0.5) * x * x) * C(0.3989422804014327);
  return cdf + x * pdf;
}

template <typename T>
struct GeluGradFn {
  bool tanh_form;
  __device__ T operator()(T grad, T x) const {
    using C = compute_t<T>;
    return T(static_cast<C>(grad) * gelu_derivative(static_cast<C>(x), tanh_form));
  }
};

struct LogicalFn {
  LogicalOp op;
  __device__ bool operator()(bool a, bool b) const {
    switch (op) {
      case LogicalOp::kAnd: return a && b;
      case LogicalOp::kOr: return a || b;
      case LogicalOp::kXor: return a != b;
    }
    return false;
  }
};

// The CPU compares the value widened to float with 0.
template <typename T>
struct LogicalNotFn {
  __device__ bool operator()(T x) const { return static_cast<float>(x) == 0.0f; }
};

template <typename T>
__global__ void masked_fill_kernel(Geometry g, int64_t numel, Operand out, Operand input, Operand mask, T value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(blockDim.x) * gridDim.x) {
    const bool m = static_cast<const bool*>(mask.data)[offset_of(i, g, mask)];
    static_cast<T*>(out.data)[offset_of(i, g, out)] = m ? value : static_cast<const T*>(input.data)[offset_of(i, g, input)];
  }
}

template <typename T>
__global__ void binary_cross_entropy_kernel(int64_t numel, const T* input, const T* target, T* out, int64_t* error) {
  using C = compute_t<T>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(blockDim.x) * gridDim.x) {
    const C x = static_cast<C>(input[i]), t = static_cast<C>(target[i]);
    if (!(x >= C(0) && x <= C(1))) error[0] = 1;  // every offending thread stores the same 1
    out[i] = static_cast<T>((t - C(1)) * fmax(log1p(-x), C(-100)) - t * fmax(log(x), C(-100)));
  }
}

// The dtypes of the CPU's numeric_dtypes(): all but bool and the 16-bit floats.
template <typename F>
const char* dispatch_numeric(ScalarType type, F&& f) {
  if (type == ScalarType::kBool) return "unsupported dtype bool";
  return dispatch_all(type, f);
}

}  // namespace

const char* sign(ScalarType type, const Geometry& g, int64_t numel, Operand out, Operand in) {
  if (numel == 0) return nullptr;
  return dispatch_numeric(type, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) return "unsupported dtype bool";
    else return launch_map1<T, T>(g, numel, out, in, SignFn<T>{});
  });
}

const char* softplus(ScalarType type, const Geometry& g, int64_t numel, Operand out, Operand in, double beta, double threshold) {
  if (numel == 0) return nullptr;
  return dispatch_floating(type, [&](auto tag) {
    using T = decltype(tag);
    return launch_map1<T, T>(g, numel, out, in, SoftplusFn<T>{static_cast<T>(beta), static_cast<T>(threshold)});
  });
}

const char* clamp(ScalarType type, const Geometry& g, int64_t numel, Operand out, Operand in, bool has_min, ScalarArg min,
                  bool has_max, ScalarArg max) {
  if (numel == 0) return nullptr;
  return dispatch_numeric(type, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      return "unsupported dtype bool";
    } else {
      const T lo = has_min ? scalar_as<T>(min) : std::numeric_limits<T>::lowest();
      const T hi = has_max ? scalar_as<T>(max) : std::numeric_limits<T>::max();
      return launch_map1<T, T>(g, numel, out, in, ClampFn<T>{lo, hi});
    }
  });
}

const char* gelu_grad(ScalarType type, bool tanh_form, const Geometry& g, int64_t numel, Operand out, Operand grad, Operand input) {
  if (numel == 0) return nullptr;
  return dispatch_floating_with_reduced(type, [&](auto tag) {
    using T = decltype(tag);
    return launch_map2<T, T>(g, numel, out, grad, input, GeluGradFn<T>{tanh_form});
  });
}

const char* logical(LogicalOp op, const Geometry& g, int64_t numel, Operand out, Operand a, Operand b) {
  if (numel == 0) return nullptr;
  return launch_map2<bool, bool>(g, numel, out, a, b, LogicalFn{op});
}

const char* logical_not(ScalarType type, const Geometry& g, int64_t numel, Operand out, Operand in) {
  if (numel == 0) return nullptr;
  return dispatch_with_reduced(type, [&](auto tag) {
    using T = decltype(tag);
    return launch_map1<bool, T>(g, numel, out, in, LogicalNotFn<T>{});
  });
}

const char* masked_fill(ScalarType type, const Geometry& g, int64_t numel, Operand out, Operand input, Operand mask, ScalarArg value) {
  if (numel == 0) return nullptr;
  return dispatch_with_reduced(type, [&](auto tag) {
    using T = decltype(tag);
    masked_fill_kernel<T><<<blocks_for(numel), kThreads>>>(g, numel, out, input, mask, scalar_as<T>(value));
    return launch_status();
  });
}

const char* binary_cross_entropy(ScalarType type, int64_t numel, const void* input, const void* target, void* out, int64_t* error) {
  if (numel == 0) return nullptr;
  return dispatch_floating_with_reduced(type, [&](auto tag) {
    using T = decltype(tag);
    binary_cross_entropy_kernel<T><<<blocks_for(numel), kThreads>>>(numel, static_cast<const T*>(input), static_cast<const T*>(target),
                                                                      static_cast<T*>(out), error);
    return launch_status();
  });
}

}  // namespace flow::cuda
