// Device code of the CUDA element-wise kernels of launch.h's op enums, casts and fills, over the
// strided and dense launchers of map.cuh.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/kernels/cuda/grid.cuh"
#include "core/kernels/cuda/launch.h"
#include "core/kernels/cuda/map.cuh"

namespace flow::cuda {
namespace {

template <typename T>
__global__ void select(Geometry g, int64_t numel, Operand out, Operand condition, Operand a, Operand b) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(blockDim.x) * gridDim.x) {
    const bool c = static_cast<const bool*>(condition.data)[offset_of(i, g, condition)];
    static_cast<T*>(out.data)[offset_of(i, g, out)] =
        c ? static_cast<const T*>(a.data)[offset_of(i, g, a)] : static_cast<const T*>(b.data)[offset_of(i, g, b)];
  }
}

template <typename T>
struct UnaryFn {
  UnaryOp op;
  __device__ T operator()(T x) const {
    if constexpr (is_reduced_v<T>) {
      return T(UnaryFn<float>{op}(static_cast<float>(x)));
    } else if constexpr (std::is_floating_point_v<T>) {
      switch (op) {
        case UnaryOp::kNeg: return -x;
        case UnaryOp::kAbs: return x < T(0) ? -x : x;
        case UnaryOp::kExp: return exp(x);
        case UnaryOp::kLog: return log(x);
        case UnaryOp::kSqrt: return sqrt(x);
        case UnaryOp::kRsqrt: return T(1) / sqrt(x);
        case UnaryOp::kSin: return sin(x);
        case UnaryOp::kCos: return cos(x);
        case UnaryOp::kTanh: return tanh(x);
        case UnaryOp::kSigmoid: return T(1) / (T(1) + exp(-x));
        case UnaryOp::kRelu: return x < T(0) ? T(0) : x;
        case UnaryOp::kGeluErf: return T(0.5) * x * (T(1) + erf(x * T(0.7071067811865476)));
        case UnaryOp::kGeluTanh:
          return T(0.5) * x * (T(1) + tanh(T(0.7978845608028654) * (x + T(0.044715) * x * x * x)));
        case UnaryOp::kSilu: return x / (T(1) + exp(-x));
      }
      return x;
    } else {
      switch (op) {
        case UnaryOp::kNeg: return -x;
        case UnaryOp::kAbs: return x < T(0) ? -x : x;
        case UnaryOp::kRelu: return x < T(0) ? T(0) : x;
        default: return x;
      }
    }
  }
};

template <typename T>
__device__ T apply_binary(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::kAdd: return a + b;
    case BinaryOp::kSub: return a - b;
    case BinaryOp::kMul: return a * b;
    case BinaryOp::kDiv: return a / b;
    case BinaryOp::kMaximum: return a < b ? b : a;
    case BinaryOp::kMinimum: return b < a ? b : a;
    case BinaryOp::kPow: return static_cast<T>(pow(static_cast<double>(a), static_cast<double>(b)));
    case BinaryOp::kRsub: return b - a;
    case BinaryOp::kRdiv: return b / a;
    case BinaryOp::kRpow: return static_cast<T>(pow(static_cast<double>(b), static_cast<double>(a)));
    case BinaryOp::kReluGrad: return b > T(0) ? a : T(0);
  }
  return a;
}

// 16-bit values compute in float and round once, as the CPU's kernels for them do.
template <typename T>
struct BinaryFn {
  BinaryOp op;
  __device__ T operator()(T a, T b) const {
    return T(apply_binary<compute_t<T>>(op, static_cast<compute_t<T>>(a), static_cast<compute_t<T>>(b)));
  }
};

template <typename T>
struct BinaryScalarFn {
  BinaryOp op;
  compute_t<T> scalar;
  __device__ T operator()(T a) const { return T(apply_binary<compute_t<T>>(op, static_cast<compute_t<T>>(a), scalar)); }
};

template <typename T>
__device__ bool apply_compare(CompareOp op, T a, T b) {
  switch (op) {
    case CompareOp::kEq: return a == b;
    case CompareOp::kNe: return a != b;
    case CompareOp::kLt: return a < b;
    case CompareOp::kLe: return a <= b;
    case CompareOp::kGt: return a > b;
    case CompareOp::kGe: return a >= b;
  }
  return false;
}

template <typename T>
struct CompareFn {
  CompareOp op;
  __device__ bool operator()(T a, T b) const {
    return apply_compare<compute_t<T>>(op, static_cast<compute_t<T>>(a), static_cast<compute_t<T>>(b));
  }
};

struct CompareScalarFn {
  CompareOp op;
  double scalar;
  template <typename T>
  __device__ bool operator()(T a) const { return apply_compare(op, static_cast<double>(static_cast<compute_t<T>>(a)), scalar); }
};

// Conversions to and from the 16-bit types go through float.
template <typename Out>
struct CastFn {
  template <typename In>
  __host__ __device__ Out operator()(In x) const {
    if constexpr (is_reduced_v<Out>) {
      return Out(static_cast<float>(x));
    } else if constexpr (is_reduced_v<In>) {
      return static_cast<Out>(static_cast<float>(x));
    } else {
      return static_cast<Out>(x);
    }
  }
};

template <typename T>
__global__ void fill_kernel(T* data, int64_t numel, T value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(blockDim.x) * gridDim.x) data[i] = value;
}

template <typename T>
__global__ void arange_kernel(T* data, int64_t numel, double start, double step) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(blockDim.x) * gridDim.x) {
    data[i] = static_cast<T>(start + step * static_cast<double>(i));
  }
}

}  // namespace

const char* unary(UnaryOp op, ScalarType type, const Geometry& g, int64_t numel, Operand out, Operand in) {
  if (numel == 0) return nullptr;
  return dispatch_with_reduced(type, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      return "unsupported dtype bool";
    } else {
      return launch_map1<T, T>(g, numel, out, in, UnaryFn<T>{op});
    }
  });
}

const char* binary(BinaryOp op, ScalarType type, const Geometry& g, int64_t numel, Operand out, Operand a, Operand b) {
  if (numel == 0) return nullptr;
  return dispatch_with_reduced(type, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      return "unsupported dtype bool";
    } else {
      return launch_map2<T, T>(g, numel, out, a, b, BinaryFn<T>{op});
    }
  });
}

const char* where_select(ScalarType type, const Geometry& g, int64_t numel, Operand out, Operand condition, Operand a, Operand b) {
  if (numel == 0) return nullptr;
  return dispatch_with_reduced(type, [&](auto tag) {
    using T = decltype(tag);
    select<T><<<blocks_for(numel), kThreads>>>(g, numel, out, condition, a, b);
    return launch_status();
  });
}

const char* binary_scalar(BinaryOp op, ScalarType type, const Geometry& g, int64_t numel, Operand out, Operand a,
                          double scalar) {
  if (numel == 0) return nullptr;
  return dispatch_with_reduced(type, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      return "unsupported dtype bool";
    } else {
      return launch_map1<T, T>(g, numel, out, a, BinaryScalarFn<T>{op, static_cast<compute_t<T>>(scalar)});
    }
  });
}

const char* compare(CompareOp op, ScalarType type, const Geometry& g, int64_t numel, Operand out, Operand a, Operand b) {
  if (numel == 0) return nullptr;
  return dispatch_with_reduced(type, [&](auto tag) {
    using T = decltype(tag);
    return launch_map2<bool, T>(g, numel, out, a, b, CompareFn<T>{op});
  });
}

const char* compare_scalar(CompareOp op, ScalarType type, const Geometry& g, int64_t numel, Operand out, Operand a,
                           double scalar) {
  if (numel == 0) return nullptr;
  return dispatch_with_reduced(type, [&](auto tag) {
    using T = decltype(tag);
    return launch_map1<bool, T>(g, numel, out, a, CompareScalarFn{op, scalar});
  });
}

const char* cast(ScalarType from, ScalarType to, const Geometry& g, int64_t numel, Operand out, Operand in) {
  if (numel == 0) return nullptr;
  return dispatch_with_reduced(from, [&](auto from_tag) {
    using In = decltype(from_tag);
    return dispatch_with_reduced(to, [&](auto to_tag) {
      using Out = decltype(to_tag);
      return launch_map1<Out, In>(g, numel, out, in, CastFn<Out>{});
    });
  });
}

const char* fill(ScalarType type, void* data, int64_t numel, double value) {
  if (numel == 0) return nullptr;
  return dispatch_with_reduced(type, [&](auto tag) {
    using T = decltype(tag);
    fill_kernel<T><<<blocks_for(numel), kThreads>>>(static_cast<T*>(data), numel, CastFn<T>{}(value));
    return launch_status();
  });
}

const char* arange(ScalarType type, void* data, int64_t numel, double start, double step) {
  if (numel == 0) return nullptr;
  return dispatch_all(type, [&](auto tag) {
    using T = decltype(tag);
    arange_kernel<T><<<blocks_for(numel), kThreads>>>(static_cast<T*>(data), numel, start, step);
    return launch_status();
  });
}

}  // namespace flow::cuda
