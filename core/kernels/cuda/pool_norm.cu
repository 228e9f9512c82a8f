// Device code beside the cuDNN kernels (cudnn_pool_norm.cpp) for what cuDNN does not offer: max
// pooling with argmax indices (and its gradient through them), and batch norm's gradient paths
// through its mean and invstd outputs.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/kernels/cuda/grid.cuh"
#include "core/kernels/cuda/launch.h"

namespace flow::cuda {
namespace {

__device__ inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
__device__ inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// One thread per output; the window scan is the CPU loops' (core/kernels/cpu/pool_loop.h), so
// values and first-argmax indices agree exactly, NaN included.
template <typename T>
__global__ void max_pool_kernel(PoolWindow g, const T* in, T* out, int64_t* indices) {
  const int64_t plane_out = g.oh * g.ow, total = g.planes * plane_out;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(blockDim.x) * gridDim.x) {
    const int64_t plane = i / plane_out, o = i % plane_out, y = o / g.ow, x = o % g.ow;
    const int64_t row_start = y * g.sh - g.ph, col_start = x * g.sw - g.pw;
    const int64_t row_begin = max64(row_start, 0), row_end = min64(row_start + g.kh, g.h);
    const int64_t col_begin = max64(col_start, 0), col_end = min64(col_start + g.kw, g.w);
    const T* src = in + plane * g.h * g.w;
    int64_t best_index = row_begin * g.w + col_begin;
    compute_t<T> best = static_cast<compute_t<T>>(src[best_index]);  // 16-bit values compare exactly as float
    for (int64_t iy = row_begin; iy < row_end; ++iy) {
      for (int64_t ix = col_begin; ix < col_end; ++ix) {
        const compute_t<T> v = static_cast<compute_t<T>>(src[iy * g.w + ix]);
        const bool take = (v > best) || (v != v && best == best);
        best = take ? v : best;
        best_index = take ? iy * g.w + ix : best_index;
      }
    }
    out[i] = T(best);
    if (indices != nullptr) indices[i] = best_index;
  }
}

// The outputs [begin, end) along one axis whose windows cover input position p.
struct CoveringRange {
  int64_t begin, end;
};
__device__ inline CoveringRange covering(int64_t p, int64_t stride, int64_t pad, int64_t kernel, int64_t outputs) {
  const int64_t lowest = p + pad - kernel + 1;  // first window start still reaching p
  const int64_t begin = lowest <= 0 ? 0 : (lowest + stride - 1) / stride;
  return {begin, min64((p + pad) / stride + 1, outputs)};
}

// One thread per input value, summing in output order like the CPU's scatter loop.
template <typename T>
__global__ void max_pool_grad_kernel(PoolWindow g, const T* grad, const int64_t* indices, T* grad_input) {
  const int64_t plane_in = g.h * g.w, total = g.planes * plane_in;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(blockDim.x) * gridDim.x) {
    const int64_t plane = i / plane_in, flat = i % plane_in, iy = flat / g.w, ix = flat % g.w;
    const CoveringRange rows = covering(iy, g.sh, g.ph, g.kh, g.oh), cols = covering(ix, g.sw, g.pw, g.kw, g.ow);
    const int64_t first = plane * g.oh * g.ow;
    compute_t<T> total_grad = 0;  // 16-bit gradients sum in float, rounded once
    for (int64_t y = rows.begin; y < rows.end; ++y) {
      for (int64_t x = cols.begin; x < cols.end; ++x) {
        const int64_t o = first + y * g.ow + x;
        if (indices[o] == flat) total_grad += static_cast<compute_t<T>>(grad[o]);
      }
    }
    grad_input[i] = T(total_grad);
  }
}

template <typename T>
__global__ void statistics_grad_kernel(int64_t n, int64_t c, int64_t s, const T* x, const T* mean, const T* invstd, const T* grad_mean,
                                       const T* grad_invstd, T* grad_input) {
  const int64_t total = n * c * s;
  const double count = static_cast<double>(n * s);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(blockDim.x) * gridDim.x) {
    const int64_t channel = (i / s) % c;
    const double inv = invstd[channel], centered = static_cast<double>(x[i]) - mean[channel];
    grad_input[i] += static_cast<T>((grad_mean[channel] - grad_invstd[channel] * inv * inv * inv * centered) / count);
  }
}

}  // namespace

const char* max_pool2d(ScalarType type, const PoolWindow& g, const void* in, void* out, int64_t* indices) {
  const int64_t numel = g.planes * g.oh * g.ow;
  if (numel == 0) return nullptr;
  return dispatch_floating_with_reduced(type, [&](auto tag) {
    using T = decltype(tag);
    max_pool_kernel<T><<<blocks_for(numel), kThreads>>>(g, static_cast<const T*>(in), static_cast<T*>(out), indices);
    return launch_status();
  });
}

const char* max_pool2d_grad(ScalarType type, const PoolWindow& g, const void* grad, const int64_t* indices, void* grad_input) {
  const int64_t numel = g.planes * g.h * g.w;
  if (numel == 0) return nullptr;
  return dispatch_floating_with_reduced(type, [&](auto tag) {
    using T = decltype(tag);
    max_pool_grad_kernel<T><<<blocks_for(numel), kThreads>>>(g, static_cast<const T*>(grad), indices, static_cast<T*>(grad_input));
    return launch_status();
  });
}

const char* batch_norm_statistics_grad(ScalarType type, int64_t n, int64_t c, int64_t s, const void* x, const void* mean,
                                       const void* invstd, const void* grad_mean, const void* grad_invstd, void* grad_input) {
  const int64_t numel = n * c * s;
  if (numel == 0) return nullptr;
  return dispatch_floating(type, [&](auto tag) {
    using T = decltype(tag);
    statistics_grad_kernel<T><<<blocks_for(numel), kThreads>>>(n, c, s, static_cast<const T*>(x), static_cast<const T*>(mean),
                                                               static_cast<const T*>(invstd), static_cast<const T*>(grad_mean),
                                                               static_cast<const T*>(grad_invstd), static_cast<T*>(grad_input));
    return launch_status();
  });
}

}  // namespace flow::cuda
