// Device code of the sparse softmax cross-entropy and its gradient: one block per row of logits,
// its threads striding over the classes and combining through shared memory in a fixed order
// (deterministic). The float operations per element are the CPU kernel's
// (core/kernels/cpu/softmax.cpp); only the order of the sums differs.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/kernels/cuda/grid.cuh"
#include "core/kernels/cuda/launch.h"

namespace flow::cuda {
namespace {

constexpr int kRowThreads = 256;

// The larger of a and b where b is not NaN: the CPU's std::max(running, x), which skips NaN.
template <typename C>
__device__ C max_skipping_nan(C a, C b) {
  return a < b ? b : a;
}

// The row's max as the CPU's row_max takes it (NaN skipped, 0 when the max is infinite) and the log
// of the sum of exp(x - max), summed in double.
template <typename T, typename C>
__device__ void row_statistics(const T* x, int64_t classes, C* shared_max, double* shared_sum, C& max_value, C& log_total) {
  C local = -std::numeric_limits<C>::infinity();
  for (int64_t i = threadIdx.x; i < classes; i += blockDim.x) local = max_skipping_nan(local, static_cast<C>(x[i]));
  shared_max[threadIdx.x] = local;
  __syncthreads();
  for (int width = blockDim.x / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) shared_max[threadIdx.x] = max_skipping_nan(shared_max[threadIdx.x], shared_max[threadIdx.x + width]);
    __syncthreads();
  }
  max_value = shared_max[0];
  __syncthreads();  // shared_max is written again for the next row
  if (isinf(max_value)) max_value = C(0);
  double total = 0;
  for (int64_t i = threadIdx.x; i < classes; i += blockDim.x) total += static_cast<double>(exp(static_cast<C>(x[i]) - max_value));
  log_total = static_cast<C>(log(block_sum(total, shared_sum)));
}

__device__ bool bad_label(int64_t label, int64_t classes, int64_t ignore_index) {
  return label != ignore_index && (label < 0 || label >= classes);
}

template <typename T>
__global__ void cross_entropy_kernel(int64_t rows, int64_t classes, int64_t ignore_index, const T* logits, const int64_t* labels,
                                     void* loss, ScalarType loss_type, compute_t<T>* max_out, compute_t<T>* log_total_out,
                                     int64_t* error) {
  using C = compute_t<T>;
  __shared__ C shared_max[kRowThreads];
  __shared__ double shared_sum[kRowThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* x = logits + r * classes;
    C max_value, log_total;
    row_statistics(x, classes, shared_max, shared_sum, max_value, log_total);
    if (threadIdx.x != 0) continue;
    max_out[r] = max_value;
    log_total_out[r] = log_total;
    const int64_t label = labels[r];
    if (bad_label(label, classes, ignore_index)) {
      error[0] = 1;  // every offending row stores the same 1; x[label] is not read
    } else {
      store_as(loss, loss_type, r, label == ignore_index ? C(0) : -((static_cast<C>(x[label]) - max_value) - log_total));
    }
  }
}

template <typename T>
__global__ void cross_entropy_grad_kernel(int64_t rows, int64_t classes, int64_t ignore_index, const void* grad, ScalarType grad_type,
                                          const T* logits, const int64_t* labels, const compute_t<T>* max_in,
                                          const compute_t<T>* log_total_in, T* grad_logits, int64_t* error) {
  using C = compute_t<T>;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* x = logits + r * classes;
    T* out = grad_logits + r * classes;
    const int64_t label = labels[r];
    if (bad_label(label, classes, ignore_index) && threadIdx.x == 0) error[0] = 1;
    if (label == ignore_index) {
      for (int64_t i = threadIdx.x; i < classes; i += blockDim.x) out[i] = T(0.0f);
      continue;
    }
    const C s = load_as<C>(grad, grad_type, r), max_value = max_in[r], log_total = log_total_in[r];
    for (int64_t i = threadIdx.x; i < classes; i += blockDim.x) {
      const C p = exp((static_cast<C>(x[i]) - max_value) - log_total);
      out[i] = static_cast<T>(i == label ? -s - p * (-s) : p * s);
    }
  }
}

}  // namespace

const char* sparse_cross_entropy(ScalarType type, ScalarType loss_type, int64_t rows, int64_t classes, int64_t ignore_index,
                                 const void* logits, const int64_t* labels, void* loss, void* max, void* log_sum_exp, int64_t* error) {
  if (rows == 0) return nullptr;
  return dispatch_floating_with_reduced(type, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    cross_entropy_kernel<T><<<blocks_for_outputs(rows), kRowThreads>>>(rows, classes, ignore_index, static_cast<const T*>(logits), labels,
                                                                       loss, loss_type, static_cast<C*>(max), static_cast<C*>(log_sum_exp),
                                                                       error);
    return launch_status();
  });
}

const char* sparse_cross_entropy_grad(ScalarType type, ScalarType grad_type, int64_t rows, int64_t classes, int64_t ignore_index,
                                      const void* grad, const void* logits, const int64_t* labels, const void* max,
                                      const void* log_sum_exp, void* grad_logits, int64_t* error) {
  if (rows == 0 || classes == 0) return nullptr;
  return dispatch_floating_with_reduced(type, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    cross_entropy_grad_kernel<T><<<blocks_for_outputs(rows), kRowThreads>>>(
        rows, classes, ignore_index, grad, grad_type, static_cast<const T*>(logits), labels, static_cast<const C*>(max),
        static_cast<const C*>(log_sum_exp), static_cast<T*>(grad_logits), error);
    return launch_status();
  });
}

}  // namespace flow::cuda
