// Device code of the CUDA reductions (sum, prod, max, min, their indices), cumsum, softmax,
// gather/scatter and the fused SGD update: what eager and Graph training need beyond the
// element-wise kernels. Reductions run one block per output over a (outer, n, inner) view, the
// block's threads striding over n and combining through shared memory in a fixed order.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/kernels/cuda/grid.cuh"
#include "core/kernels/cuda/launch.h"

namespace flow::cuda {
namespace {

constexpr int kReduceThreads = 256;

template <typename F>
const char* dispatch_numeric(ScalarType type, F&& f) {
  switch (type) {
    case ScalarType::kFloat32: return f(float{});
    case ScalarType::kFloat64: return f(double{});
    case ScalarType::kInt64: return f(int64_t{});
    case ScalarType::kInt32: return f(int32_t{});
    case ScalarType::kUInt8: return f(uint8_t{});
    case ScalarType::kInt8: return f(int8_t{});
    default: return "unsupported dtype";
  }
}

// Combines two partial results of a reduction; integers wrap (two's complement) as on the CPU.
// Max and min keep a NaN: once either side is NaN the result is.
template <typename Acc>
__device__ Acc combine(ReduceOp op, Acc a, Acc b) {
  switch (op) {
    case ReduceOp::kSum: return a + b;
    case ReduceOp::kProd:
      if constexpr (std::is_integral_v<Acc>) {
        return static_cast<Acc>(static_cast<unsigned long long>(a) * static_cast<unsigned long long>(b));
      } else {
        return a * b;
      }
    case ReduceOp::kMax: return a != a ? a : (b != b || b > a ? b : a);
    case ReduceOp::kMin: return a != a ? a : (b != b || b < a ? b : a);
  }
  return a;
}

// The identity of op: max and min start from the input's first element instead.
template <typename Acc>
__device__ Acc identity(ReduceOp op) {
  return op == ReduceOp::kProd ? Acc(1) : Acc(0);
}

// Tree combination in shared memory, in a fixed order; every thread gets the result.
template <typename Acc>
__device__ Acc block_combine(ReduceOp op, Acc value, Acc* shared) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int width = blockDim.x / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) shared[threadIdx.x] = combine(op, shared[threadIdx.x], shared[threadIdx.x + width]);
    __syncthreads();
  }
  const Acc total = shared[0];
  __syncthreads();  // shared is reused by the next output
  return total;
}

template <typename T, typename Acc>
__global__ void reduce_kernel(ReduceOp op, int64_t outputs, int64_t n, int64_t inner, const T* in, T* out) {
  __shared__ Acc shared[kReduceThreads];
  const bool extremum = op == ReduceOp::kMax || op == ReduceOp::kMin;
  for (int64_t o = blockIdx.x; o < outputs; o += gridDim.x) {
    const T* base = in + (o / inner) * n * inner + o % inner;
    Acc acc = extremum && n > 0 ? static_cast<Acc>(base[0]) : identity<Acc>(op);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc = combine(op, acc, static_cast<Acc>(base[i * inner]));
    acc = block_combine(op, acc, shared);
    if (threadIdx.x == 0) out[o] = static_cast<T>(acc);
  }
}

template <typename T>
__device__ bool is_nan(T v) {
  return v != v;
}

// (value, index) with NaN winning and the first index among equals: the CPU loop's rule.
template <bool is_max, typename T>
__device__ bool better(T v, int64_t i, T best, int64_t best_index) {
  if (is_nan(best)) return is_nan(v) && i < best_index;
  if (is_nan(v)) return true;
  return (is_max ? v > best : v < best) || (v == best && i < best_index);
}

// Index (and value, where values is not null) of the max or min; 16-bit values compare as float
// (exactly).
template <typename T, bool is_max>
__global__ void extremum_index_kernel(int64_t outputs, int64_t n, int64_t inner, const T* in, int64_t* out, T* out_values) {
  using C = compute_t<T>;
  __shared__ C values[kReduceThreads];
  __shared__ int64_t indices[kReduceThreads];
  for (int64_t o = blockIdx.x; o < outputs; o += gridDim.x) {
    const T* base = in + (o / inner) * n * inner + o % inner;
    C best = static_cast<C>(base[0]);
    int64_t best_index = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const C v = static_cast<C>(base[i * inner]);
      if (better<is_max>(v, i, best, best_index)) {
        best = v;
        best_index = i;
      }
    }
    values[threadIdx.x] = best;
    indices[threadIdx.x] = best_index;
    __syncthreads();
    for (int width = blockDim.x / 2; width > 0; width /= 2) {
      if (threadIdx.x < width &&
          better<is_max>(values[threadIdx.x + width], indices[threadIdx.x + width], values[threadIdx.x], indices[threadIdx.x])) {
        values[threadIdx.x] = values[threadIdx.x + width];
        indices[threadIdx.x] = indices[threadIdx.x + width];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      out[o] = indices[0];
      if (out_values != nullptr) out_values[o] = base[indices[0] * inner];
    }
    __syncthreads();
  }
}

// Max-shifted like the CPU kernel: an all -inf slice keeps a zero shift (NaN results, as PyTorch).
template <typename T, bool log_output>
__global__ void softmax_kernel(int64_t slices, int64_t n, int64_t inner, const T* in, T* out) {
  __shared__ T shared[kReduceThreads];
  for (int64_t s = blockIdx.x; s < slices; s += gridDim.x) {
    const int64_t base = (s / inner) * n * inner + s % inner;
    const T* x = in + base;
    T* y = out + base;
    T max_value = -std::numeric_limits<T>::infinity();
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) max_value = fmax(max_value, x[i * inner]);
    shared[threadIdx.x] = max_value;
    __syncthreads();
    for (int width = blockDim.x / 2; width > 0; width /= 2) {
      if (threadIdx.x < width) shared[threadIdx.x] = fmax(shared[threadIdx.x], shared[threadIdx.x + width]);
      __syncthreads();
    }
    max_value = shared[0];
    __syncthreads();
    if (isinf(max_value)) max_value = T(0);
    T total = T(0);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) total += exp(x[i * inner] - max_value);
    total = block_sum(total, shared);
    if constexpr (log_output) {
      const T log_total = log(total);
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x) y[i * inner] = (x[i * inner] - max_value) - log_total;
    } else {
      const T scale = T(1) / total;
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x) y[i * inner] = exp(x[i * inner] - max_value) * scale;
    }
  }
}

// Offsets of index position `linear` (row-major over index_sizes) in the two strided tensors,
// leaving out dim in the target's.
__device__ inline void offsets_of(int64_t linear, const IndexGeometry& g, int64_t& target, int64_t& other) {
  target = 0;
  other = 0;
#pragma unroll
  for (int d = kMaxDims - 1; d >= 0; --d) {
    if (d < g.ndim) {
      const int64_t position = linear % g.index_sizes[d];
      linear /= g.index_sizes[d];
      other += position * g.other_strides[d];
      if (d != g.dim) target += position * g.target_strides[d];
    }
  }
}

// The index as a position along dim, or -1 (and error recorded) when out of range.
template <typename Index>
__device__ int64_t resolve(Index value, int64_t size, int64_t* error) {
  const int64_t i = static_cast<int64_t>(value);
  if (i < -size || i >= size) {
    if (atomicCAS(reinterpret_cast<unsigned long long*>(error), 0ull, 1ull) == 0ull) error[1] = i;
    return -1;
  }
  return i < 0 ? i + size : i;
}

template <typename T, typename Index>
__global__ void gather_kernel(IndexGeometry g, int64_t numel, const T* input, const Index* index, T* out, int64_t* error) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < numel; k += int64_t(blockDim.x) * gridDim.x) {
    int64_t target = 0, other = 0;
    offsets_of(k, g, target, other);
    const int64_t i = resolve(index[k], g.dim_size, error);
    if (i >= 0) out[other] = input[target + i * g.target_strides[g.dim]];
  }
}

// One thread per slice along dim (all index positions that differ only along dim).
template <typename T, typename Index>
__global__ void scatter_kernel(IndexGeometry g, int64_t slices, bool add, const T* src, const Index* index, T* out, int64_t* error) {
  const int64_t along = g.index_sizes[g.dim];
  int64_t inner = 1;
  for (int d = g.dim + 1; d < g.ndim; ++d) inner *= g.index_sizes[d];
  for (int64_t s = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; s < slices; s += int64_t(blockDim.x) * gridDim.x) {
    const int64_t first = (s / inner) * along * inner + s % inner;
    for (int64_t j = 0; j < along; ++j) {
      const int64_t k = first + j * inner;
      int64_t target = 0, other = 0;
      offsets_of(k, g, target, other);
      const int64_t i = resolve(index[k], g.dim_size, error);
      if (i < 0) continue;
      T& slot = out[target + i * g.target_strides[g.dim]];
      slot = add ? static_cast<T>(slot + src[other]) : src[other];
    }
  }
}

// One thread per (outer, inner) column walks the dim in order, as the CPU does: floating values
// accumulate in double (PyTorch's CPU acc_type) and round at every step, integers wrap.
template <typename T>
__global__ void cumsum_kernel(int64_t columns, int64_t n, int64_t inner, bool reverse, const T* in, T* out) {
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double, unsigned long long>;
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < columns; c += int64_t(blockDim.x) * gridDim.x) {
    const int64_t first = (c / inner) * n * inner + c % inner;
    Acc acc = Acc(0);
    for (int64_t step = 0; step < n; ++step) {
      const int64_t k = first + (reverse ? n - 1 - step : step) * inner;
      acc += static_cast<Acc>(in[k]);
      out[k] = static_cast<T>(acc);
    }
  }
}

template <typename T>
__global__ void sgd_kernel(int64_t numel, T* param, const T* grad, T* buffer, SgdStep step) {
  const T lr = static_cast<T>(step.lr), momentum = static_cast<T>(step.momentum), keep = static_cast<T>(1.0 - step.dampening);
  const T weight_decay = static_cast<T>(step.weight_decay);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(blockDim.x) * gridDim.x) {
    T d = step.weight_decay != 0 ? grad[i] + param[i] * weight_decay : grad[i];
    if (buffer != nullptr) {
      buffer[i] = step.buffer_initialized ? buffer[i] * momentum + d * keep : d;
      d = step.nesterov ? d + buffer[i] * momentum : buffer[i];
    }
    param[i] = param[i] - d * lr;
  }
}

template <typename F>
const char* dispatch_index(bool index64, F&& f) {
  return index64 ? f(int64_t{}) : f(int32_t{});
}

}  // namespace

const char* reduce_middle(ReduceOp op, ScalarType type, int64_t outer, int64_t n, int64_t inner, const void* in, void* out) {
  const int64_t outputs = outer * inner;
  if (outputs == 0) return nullptr;
  // 16-bit sums accumulate in float and round once; max and min are exact in their own type.
  auto run = [&](auto tag) {
    using T = decltype(tag);
    using Acc = std::conditional_t<std::is_floating_point_v<T> || is_reduced_v<T>, compute_t<T>, int64_t>;
    reduce_kernel<T, Acc><<<blocks_for_outputs(outputs), kReduceThreads>>>(op, outputs, n, inner, static_cast<const T*>(in), static_cast<T*>(out));
    return launch_status();
  };
  return with_reduced(type, run, [](ScalarType t, auto& f) { return dispatch_numeric(t, f); });
}

const char* extremum_index_middle(bool is_max, ScalarType type, int64_t outer, int64_t n, int64_t inner, const void* in, int64_t* out,
                                  void* values) {
  const int64_t outputs = outer * inner;
  if (outputs == 0) return nullptr;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(in);
    T* v = static_cast<T*>(values);
    if (is_max) extremum_index_kernel<T, true><<<blocks_for_outputs(outputs), kReduceThreads>>>(outputs, n, inner, x, out, v);
    else extremum_index_kernel<T, false><<<blocks_for_outputs(outputs), kReduceThreads>>>(outputs, n, inner, x, out, v);
    return launch_status();
  };
  return with_reduced(type, run, [](ScalarType t, auto& f) { return dispatch_numeric(t, f); });
}

const char* cumsum_middle(ScalarType type, bool reverse, int64_t outer, int64_t n, int64_t inner, const void* in, void* out) {
  const int64_t columns = outer * inner;
  if (columns == 0 || n == 0) return nullptr;
  return dispatch_numeric(type, [&](auto tag) {
    using T = decltype(tag);
    cumsum_kernel<T><<<blocks_for(columns), kThreads>>>(columns, n, inner, reverse, static_cast<const T*>(in), static_cast<T*>(out));
    return launch_status();
  });
}

const char* softmax_middle(ScalarType type, bool log_output, int64_t outer, int64_t n, int64_t inner, const void* in, void* out) {
  const int64_t slices = outer * inner;
  if (slices == 0 || n == 0) return nullptr;
  return dispatch_floating(type, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(in);
    T* y = static_cast<T*>(out);
    if (log_output) softmax_kernel<T, true><<<blocks_for_outputs(slices), kReduceThreads>>>(slices, n, inner, x, y);
    else softmax_kernel<T, false><<<blocks_for_outputs(slices), kReduceThreads>>>(slices, n, inner, x, y);
    return launch_status();
  });
}

const char* gather(ScalarType type, bool index64, const IndexGeometry& g, const void* input, const void* index, void* out,
                   int64_t* error) {
  int64_t numel = 1;
  for (int d = 0; d < g.ndim; ++d) numel *= g.index_sizes[d];
  if (numel == 0) return nullptr;
  return dispatch_all(type, [&](auto tag) {
    using T = decltype(tag);
    return dispatch_index(index64, [&](auto index_tag) {
      using Index = decltype(index_tag);
      gather_kernel<T, Index><<<blocks_for(numel), kThreads>>>(g, numel, static_cast<const T*>(input), static_cast<const Index*>(index),
                                                               static_cast<T*>(out), error);
      return launch_status();
    });
  });
}

const char* scatter(ScalarType type, bool index64, bool add, const IndexGeometry& g, const void* src, const void* index,
                    void* out, int64_t* error) {
  int64_t slices = 1;
  for (int d = 0; d < g.ndim; ++d) slices *= d == g.dim ? 1 : g.index_sizes[d];
  if (slices == 0 || g.index_sizes[g.dim] == 0) return nullptr;
  return dispatch_all(type, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      if (add) return "scatter_add does not support bool";
    }
    return dispatch_index(index64, [&](auto index_tag) {
      using Index = decltype(index_tag);
      scatter_kernel<T, Index><<<blocks_for(slices), kThreads>>>(g, slices, add, static_cast<const T*>(src),
                                                                 static_cast<const Index*>(index), static_cast<T*>(out), error);
      return launch_status();
    });
  });
}

const char* sgd_update(ScalarType type, int64_t numel, void* param, const void* grad, void* buffer, const SgdStep& step) {
  if (numel == 0) return nullptr;
  return dispatch_floating(type, [&](auto tag) {
    using T = decltype(tag);
    sgd_kernel<T><<<blocks_for(numel), kThreads>>>(numel, static_cast<T*>(param), static_cast<const T*>(grad), static_cast<T*>(buffer), step);
    return launch_status();
  });
}

}  // namespace flow::cuda
