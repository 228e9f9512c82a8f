// Device code of the CUDA element-wise kernels: one grid-stride kernel per operand count, with
// per-operand strided offsets (broadcasting through stride 0) over dims the host merged.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/kernels/cuda/grid.cuh"
#include "core/kernels/cuda/launch.h"

namespace flow::cuda {
namespace {

// Unrolled over kMaxDims so that every index into the by-value kernel parameters is a constant: a
// runtime index makes the compiler copy Geometry and each Operand into per-thread local memory
// (216-288 bytes of stack per thread, measured as ~285 bytes of DRAM traffic per element).
__device__ inline int64_t offset_of(int64_t linear, const Geometry& g, const Operand& operand) {
  if (g.ndim == 1) return linear * operand.strides[0];  // dense operands: the host merged their dims
  int64_t offset = 0;
#pragma unroll
  for (int d = kMaxDims - 1; d >= 0; --d) {
    if (d < g.ndim) {
      offset += (linear % g.sizes[d]) * operand.strides[d];
      linear /= g.sizes[d];
    }
  }
  return offset;
}

template <typename Out, typename In, typename F>
__global__ void map1(Geometry g, int64_t numel, Operand out, Operand in, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(blockDim.x) * gridDim.x) {
    const In x = static_cast<const In*>(in.data)[offset_of(i, g, in)];
    static_cast<Out*>(out.data)[offset_of(i, g, out)] = f(x);
  }
}

template <typename Out, typename In, typename F>
__global__ void map2(Geometry g, int64_t numel, Operand out, Operand a, Operand b, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(blockDim.x) * gridDim.x) {
    const In x = static_cast<const In*>(a.data)[offset_of(i, g, a)];
    const In y = static_cast<const In*>(b.data)[offset_of(i, g, b)];
    static_cast<Out*>(out.data)[offset_of(i, g, out)] = f(x, y);
  }
}

template <typename T>
__global__ void select(Geometry g, int64_t numel, Operand out, Operand condition, Operand a, Operand b) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(blockDim.x) * gridDim.x) {
    const bool c = static_cast<const bool*>(condition.data)[offset_of(i, g, condition)];
    static_cast<T*>(out.data)[offset_of(i, g, out)] =
        c ? static_cast<const T*>(a.data)[offset_of(i, g, a)] : static_cast<const T*>(b.data)[offset_of(i, g, b)];
  }
}

// Dense operands (one merged dim, unit strides, aligned) move kVector elements per load and store.
constexpr int kVector = 4;

template <typename T>
struct alignas(sizeof(T) * kVector) Pack {
  T values[kVector];
};

template <typename Out, typename In, typename F>
__global__ void map1_dense(int64_t packs, Pack<Out>* out, const Pack<In>* in, F f) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < packs; p += int64_t(blockDim.x) * gridDim.x) {
    const Pack<In> x = in[p];
    Pack<Out> y;
#pragma unroll
    for (int k = 0; k < kVector; ++k) y.values[k] = f(x.values[k]);
    out[p] = y;
  }
}

template <typename Out, typename In, typename F>
__global__ void map2_dense(int64_t packs, Pack<Out>* out, const Pack<In>* a, const Pack<In>* b, F f) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < packs; p += int64_t(blockDim.x) * gridDim.x) {
    const Pack<In> x = a[p], y = b[p];
    Pack<Out> z;
#pragma unroll
    for (int k = 0; k < kVector; ++k) z.values[k] = f(x.values[k], y.values[k]);
    out[p] = z;
  }
}

template <typename T>
bool packs_fit(const Geometry& g, const Operand& operand) {
  return g.ndim == 1 && operand.strides[0] == 1 && reinterpret_cast<uintptr_t>(operand.data) % sizeof(Pack<T>) == 0;
}

// The operand's elements from `first` on, as a one-dim dense tail.
template <typename T>
Operand advanced(Operand operand, int64_t first) {
  operand.data = static_cast<T*>(operand.data) + first;
  return operand;
}

// Runs f over every element: whole packs through the dense kernel where the operands allow it,
// the rest (all of it for strided or broadcast operands) through the strided one.
template <typename Out, typename In, typename F>
const char* launch_map1(const Geometry& g, int64_t numel, Operand out, Operand in, F f) {
  if (packs_fit<Out>(g, out) && packs_fit<In>(g, in)) {
    const int64_t packs = numel / kVector, first = packs * kVector;
    if (packs > 0) {
      map1_dense<Out, In><<<blocks_for(packs), kThreads>>>(packs, static_cast<Pack<Out>*>(out.data), static_cast<const Pack<In>*>(in.data), f);
    }
    if (first < numel) {
      Geometry tail;
      tail.ndim = 1;
      tail.sizes[0] = numel - first;
      map1<Out, In><<<blocks_for(numel - first), kThreads>>>(tail, numel - first, advanced<Out>(out, first), advanced<In>(in, first), f);
    }
  } else {
    map1<Out, In><<<blocks_for(numel), kThreads>>>(g, numel, out, in, f);
  }
  return launch_status();
}

template <typename Out, typename In, typename F>
const char* launch_map2(const Geometry& g, int64_t numel, Operand out, Operand a, Operand b, F f) {
  if (packs_fit<Out>(g, out) && packs_fit<In>(g, a) && packs_fit<In>(g, b)) {
    const int64_t packs = numel / kVector, first = packs * kVector;
    if (packs > 0) {
      map2_dense<Out, In><<<blocks_for(packs), kThreads>>>(packs, static_cast<Pack<Out>*>(out.data), static_cast<const Pack<In>*>(a.data),
                                                           static_cast<const Pack<In>*>(b.data), f);
    }
    if (first < numel) {
      Geometry tail;
      tail.ndim = 1;
      tail.sizes[0] = numel - first;
      map2<Out, In><<<blocks_for(numel - first), kThreads>>>(tail, numel - first, advanced<Out>(out, first), advanced<In>(a, first),
                                                             advanced<In>(b, first), f);
    }
  } else {
    map2<Out, In><<<blocks_for(numel), kThreads>>>(g, numel, out, a, b, f);
  }
  return launch_status();
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
