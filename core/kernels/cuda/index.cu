// Device code of the kernels that place elements by their position: index_select, one_hot,
// tril/triu, eye and linspace. Moves of whole elements go through an unsigned type of the
// element's size, so one instance serves every dtype of that size.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/kernels/cuda/grid.cuh"
#include "core/kernels/cuda/launch.h"

namespace flow::cuda {
namespace {

// f(U{}) for the unsigned type U of `item` bytes.
template <typename F>
const char* dispatch_bytes(int item, F&& f) {
  switch (item) {
    case 1: return f(uint8_t{});
    case 2: return f(uint16_t{});
    case 4: return f(uint32_t{});
    case 8: return f(uint64_t{});
    default: return "unsupported element size";
  }
}

// Records the first bad value seen (error[0] = 1, error[1] = value).
__device__ void record_error(int64_t value, int64_t* error) {
  if (atomicCAS(reinterpret_cast<unsigned long long*>(error), 0ull, 1ull) == 0ull) error[1] = value;
}

template <typename U, typename Index>
__global__ void index_select_kernel(int64_t numel, int64_t n, int64_t size, int64_t inner, const U* in, const Index* index, U* out,
                                    int64_t* error) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < numel; k += int64_t(blockDim.x) * gridDim.x) {
    const int64_t i = k % inner, j = (k / inner) % n, o = k / (inner * n);
    int64_t row = static_cast<int64_t>(index[j]);
    if (row < -size || row >= size) {
      record_error(row, error);
      continue;
    }
    if (row < 0) row += size;
    out[k] = in[(o * size + row) * inner + i];
  }
}

// out is zero; writes the ones.
__global__ void one_hot_kernel(int64_t numel, int64_t classes, const int64_t* indices, int64_t* out, int64_t* error) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < numel; k += int64_t(blockDim.x) * gridDim.x) {
    const int64_t c = indices[k];
    if (c < 0 || c >= classes) record_error(c, error);
    else out[k * classes + c] = 1;
  }
}

// Keeps element (i, j) of each matrix where j - i <= diagonal (tril) or >= diagonal (triu); j - i
// lies in (-rows, cols), so the comparison cannot overflow for any diagonal.
template <typename U, bool lower>
__global__ void triangular_kernel(int64_t numel, int64_t rows, int64_t cols, int64_t diagonal, const U* in, U* out) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < numel; k += int64_t(blockDim.x) * gridDim.x) {
    const int64_t j = k % cols, i = (k / cols) % rows;
    const bool keep = lower ? j - i <= diagonal : j - i >= diagonal;
    out[k] = keep ? in[k] : U(0);  // zero bits are 0 in every dtype
  }
}

template <typename T>
__global__ void eye_kernel(int64_t numel, int64_t cols, T one, T zero, T* out) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < numel; k += int64_t(blockDim.x) * gridDim.x) {
    out[k] = k / cols == k % cols ? one : zero;
  }
}

// The CPU's formula: the second half counted back from `end` so both endpoints are exact. The
// _rn intrinsics keep nvcc from fusing the multiply and add, which would round differently.
template <typename T>
__global__ void linspace_kernel(int64_t steps, double start, double end, double step, T* out) {
  const int64_t half = steps / 2;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < steps; i += int64_t(blockDim.x) * gridDim.x) {
    const double value = i < half || steps == 1 ? __dadd_rn(start, __dmul_rn(step, static_cast<double>(i)))
                                                : __dsub_rn(end, __dmul_rn(step, static_cast<double>(steps - 1 - i)));
    out[i] = static_cast<T>(value);
  }
}

}  // namespace

const char* index_select(int item, bool index64, int64_t outer, int64_t size, int64_t inner, int64_t n, const void* input,
                         const void* index, void* out, int64_t* error) {
  const int64_t numel = outer * n * inner;
  if (numel == 0) return nullptr;
  return dispatch_bytes(item, [&](auto tag) {
    using U = decltype(tag);
    auto run = [&](auto index_tag) {
      using Index = decltype(index_tag);
      index_select_kernel<U, Index><<<blocks_for(numel), kThreads>>>(numel, n, size, inner, static_cast<const U*>(input),
                                                                     static_cast<const Index*>(index), static_cast<U*>(out), error);
      return launch_status();
    };
    return index64 ? run(int64_t{}) : run(int32_t{});
  });
}

const char* one_hot(int64_t numel, int64_t classes, const int64_t* indices, int64_t* out, int64_t* error) {
  if (numel == 0) return nullptr;
  one_hot_kernel<<<blocks_for(numel), kThreads>>>(numel, classes, indices, out, error);
  return launch_status();
}

const char* triangular(bool lower, int item, int64_t numel, int64_t rows, int64_t cols, int64_t diagonal, const void* in, void* out) {
  if (numel == 0) return nullptr;
  return dispatch_bytes(item, [&](auto tag) {
    using U = decltype(tag);
    const U* src = static_cast<const U*>(in);
    U* dst = static_cast<U*>(out);
    if (lower) triangular_kernel<U, true><<<blocks_for(numel), kThreads>>>(numel, rows, cols, diagonal, src, dst);
    else triangular_kernel<U, false><<<blocks_for(numel), kThreads>>>(numel, rows, cols, diagonal, src, dst);
    return launch_status();
  });
}

const char* eye(ScalarType type, int64_t rows, int64_t cols, void* out) {
  const int64_t numel = rows * cols;
  if (numel == 0) return nullptr;
  return dispatch_with_reduced(type, [&](auto tag) {
    using T = decltype(tag);
    T one, zero;
    if constexpr (is_reduced_v<T>) {
      one = T(1.0f);
      zero = T(0.0f);
    } else {
      one = T(1);
      zero = T(0);
    }
    eye_kernel<T><<<blocks_for(numel), kThreads>>>(numel, cols, one, zero, static_cast<T*>(out));
    return launch_status();
  });
}

const char* linspace(ScalarType type, int64_t steps, double start, double end, void* out) {
  if (steps == 0) return nullptr;
  const double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  return dispatch_all(type, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      return "unsupported dtype bool";
    } else {
      linspace_kernel<T><<<blocks_for(steps), kThreads>>>(steps, start, end, step, static_cast<T*>(out));
      return launch_status();
    }
  });
}

}  // namespace flow::cuda
