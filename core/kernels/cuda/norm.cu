// Device code of the row normalisations' kernels: layer norm forward and backward, and the
// gradients of softmax and log_softmax. One block per row (slice), its threads striding over the
// row and combining through block_sum, so every result is computed in one fixed order.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/kernels/cuda/grid.cuh"
#include "core/kernels/cuda/launch.h"

namespace flow::cuda {
namespace {

constexpr int kRowThreads = 256;

// Two passes over the row (mean, then squared deviations), as the CPU's float64 loops.
template <typename T>
__global__ void layer_norm_kernel(int64_t rows, int64_t features, T eps, const T* x, const T* weight, const T* bias, T* y, T* mean_out,
                                  T* rstd_out) {
  __shared__ T shared[kRowThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * features;
    T total = T(0);
    for (int64_t f = threadIdx.x; f < features; f += blockDim.x) total += row[f];
    const T mean = block_sum(total, shared) / static_cast<T>(features);
    T squares = T(0);
    for (int64_t f = threadIdx.x; f < features; f += blockDim.x) squares += (row[f] - mean) * (row[f] - mean);
    const T rstd = T(1) / sqrt(block_sum(squares, shared) / static_cast<T>(features) + eps);
    if (threadIdx.x == 0) {
      mean_out[r] = mean;
      rstd_out[r] = rstd;
    }
    for (int64_t f = threadIdx.x; f < features; f += blockDim.x) {
      const T normalized = (row[f] - mean) * rstd;
      y[r * features + f] = weight != nullptr ? normalized * weight[f] + bias[f] : normalized;
    }
  }
}

// Per row, with g = dy * weight and xhat = (x - mean) * rstd:
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
template <typename T>
__global__ void layer_norm_input_grad_kernel(int64_t rows, int64_t features, const T* dy, const T* x, const T* mean, const T* rstd,
                                             const T* weight, T* dx) {
  __shared__ T shared[kRowThreads];
  const T n = static_cast<T>(features);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * features;
    T sum_g = T(0), sum_g_xhat = T(0);
    for (int64_t f = threadIdx.x; f < features; f += blockDim.x) {
      const T g = dy[base + f] * (weight != nullptr ? weight[f] : T(1));
      sum_g += g;
      sum_g_xhat += g * (x[base + f] - mean[r]) * rstd[r];
    }
    sum_g = block_sum(sum_g, shared);
    sum_g_xhat = block_sum(sum_g_xhat, shared);
    for (int64_t f = threadIdx.x; f < features; f += blockDim.x) {
      const T g = dy[base + f] * (weight != nullptr ? weight[f] : T(1)), xhat = (x[base + f] - mean[r]) * rstd[r];
      dx[base + f] = rstd[r] * (g - sum_g / n - xhat * sum_g_xhat / n);
    }
  }
}

// grad_weight[f] = sum over rows of dy * xhat, grad_bias[f] = sum of dy. A block takes
// kColumns features (threadIdx.x, so reads along a row coalesce); its kRowGroups rows of threads
// stride over the rows, and row group 0 adds the groups' partial sums in order.
constexpr int kColumns = 32, kRowGroups = 8;

template <typename T>
__global__ void layer_norm_affine_grad_kernel(int64_t rows, int64_t features, const T* dy, const T* x, const T* mean, const T* rstd,
                                              T* grad_weight, T* grad_bias) {
  __shared__ T weight_parts[kRowGroups][kColumns];
  __shared__ T bias_parts[kRowGroups][kColumns];
  const int64_t f = blockIdx.x * int64_t(kColumns) + threadIdx.x;
  T sum_dy_xhat = T(0), sum_dy = T(0);
  if (f < features) {
    for (int64_t r = threadIdx.y; r < rows; r += kRowGroups) {
      const T g = dy[r * features + f];
      sum_dy += g;
      sum_dy_xhat += g * (x[r * features + f] - mean[r]) * rstd[r];
    }
  }
  weight_parts[threadIdx.y][threadIdx.x] = sum_dy_xhat;
  bias_parts[threadIdx.y][threadIdx.x] = sum_dy;
  __syncthreads();
  if (threadIdx.y == 0 && f < features) {
    T total_weight = T(0), total_bias = T(0);
    for (int group = 0; group < kRowGroups; ++group) {
      total_weight += weight_parts[group][threadIdx.x];
      total_bias += bias_parts[group][threadIdx.x];
    }
    grad_weight[f] = total_weight;
    grad_bias[f] = total_bias;
  }
}

// Per slice, with g the output's gradient and y the output: softmax's input gradient is
// y (g - sum(g y)), log_softmax's g - exp(y) sum(g) (core/kernels/cpu/softmax.cpp).
template <typename T, bool log_output>
__global__ void softmax_grad_kernel(int64_t slices, int64_t n, int64_t inner, const T* grad, const T* out, T* grad_input) {
  __shared__ T shared[kRowThreads];
  for (int64_t s = blockIdx.x; s < slices; s += gridDim.x) {
    const int64_t base = (s / inner) * n * inner + s % inner;
    const T *g = grad + base, *y = out + base;
    T* result = grad_input + base;
    T total = T(0);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) total += log_output ? g[i * inner] : g[i * inner] * y[i * inner];
    total = block_sum(total, shared);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const int64_t k = i * inner;
      result[k] = log_output ? g[k] - exp(y[k]) * total : y[k] * (g[k] - total);
    }
  }
}

}  // namespace

const char* layer_norm(ScalarType type, int64_t rows, int64_t features, double eps, const void* x, const void* weight, const void* bias,
                       void* y, void* mean, void* rstd) {
  if (rows == 0 || features == 0) return nullptr;
  return dispatch_floating(type, [&](auto tag) {
    using T = decltype(tag);
    layer_norm_kernel<T><<<blocks_for_outputs(rows), kRowThreads>>>(rows, features, static_cast<T>(eps), static_cast<const T*>(x),
                                                                     static_cast<const T*>(weight), static_cast<const T*>(bias),
                                                                     static_cast<T*>(y), static_cast<T*>(mean), static_cast<T*>(rstd));
    return launch_status();
  });
}

const char* layer_norm_grad(ScalarType type, int64_t rows, int64_t features, const void* dy, const void* x, const void* mean,
                            const void* rstd, const void* weight, void* dx, void* grad_weight, void* grad_bias) {
  if (features == 0) return nullptr;
  return dispatch_floating(type, [&](auto tag) {
    using T = decltype(tag);
    const T *dy_t = static_cast<const T*>(dy), *x_t = static_cast<const T*>(x);
    const T *mean_t = static_cast<const T*>(mean), *rstd_t = static_cast<const T*>(rstd);
    if (rows > 0) {
      layer_norm_input_grad_kernel<T><<<blocks_for_outputs(rows), kRowThreads>>>(rows, features, dy_t, x_t, mean_t, rstd_t,
                                                                                 static_cast<const T*>(weight), static_cast<T*>(dx));
    }
    const int64_t column_blocks = (features + kColumns - 1) / kColumns;
    layer_norm_affine_grad_kernel<T><<<static_cast<unsigned>(column_blocks), dim3(kColumns, kRowGroups)>>>(
        rows, features, dy_t, x_t, mean_t, rstd_t, static_cast<T*>(grad_weight), static_cast<T*>(grad_bias));
    return launch_status();
  });
}

const char* softmax_grad_middle(ScalarType type, bool log_output, int64_t outer, int64_t n, int64_t inner, const void* grad,
                                const void* out, void* grad_input) {
  const int64_t slices = outer * inner;
  if (slices == 0 || n == 0) return nullptr;
  return dispatch_floating(type, [&](auto tag) {
    using T = decltype(tag);
    const T *g = static_cast<const T*>(grad), *y = static_cast<const T*>(out);
    T* result = static_cast<T*>(grad_input);
    if (log_output) softmax_grad_kernel<T, true><<<blocks_for_outputs(slices), kRowThreads>>>(slices, n, inner, g, y, result);
    else softmax_grad_kernel<T, false><<<blocks_for_outputs(slices), kRowThreads>>>(slices, n, inner, g, y, result);
    return launch_status();
  });
}

}  // namespace flow::cuda
