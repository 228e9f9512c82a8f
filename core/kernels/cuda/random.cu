// Device code of the random fills: one thread per element draws its Philox block, as the CPU
// kernels do, so results depend only on (seed, offset) and match the CPU's.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/kernels/cuda/grid.cuh"
#include "core/kernels/cuda/launch.h"
#include "core/kernels/cuda/philox.cuh"

namespace flow::cuda {
namespace {

template <typename T, typename F>
__global__ void fill_random_kernel(int64_t numel, T* out, uint64_t seed, uint64_t offset, F value_of) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(blockDim.x) * gridDim.x) {
    uint32_t words[4];
    philox_block(seed, offset + static_cast<uint64_t>(i), words);
    out[i] = value_of(words);
  }
}

template <typename T, typename F>
const char* launch_fill(int64_t numel, void* out, uint64_t seed, uint64_t offset, F value_of) {
  if (numel == 0) return nullptr;
  fill_random_kernel<T><<<blocks_for(numel), kThreads>>>(numel, static_cast<T*>(out), seed, offset, value_of);
  return launch_status();
}

template <typename T>
struct UniformFn {
  double low, high;
  // Explicit roundings: no contraction into an FMA, which the CPU build does not do either.
  __device__ T operator()(const uint32_t* words) const {
    const double u = sizeof(T) == sizeof(double) ? philox_unit53(words[0], words[1]) : philox_unit(words[0]);
    return static_cast<T>(__dadd_rn(low, __dmul_rn(__dsub_rn(high, low), u)));
  }
};

template <typename T>
struct NormalFn {
  double mean, std;
  // Box-Muller; 1 - u keeps the logarithm's argument in (0, 1].
  __device__ T operator()(const uint32_t* words) const {
    const double u1 = 1.0 - philox_unit53(words[0], words[1]);
    const double u2 = philox_unit53(words[2], words[3]);
    return static_cast<T>(mean + std * sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2));
  }
};

template <typename T>
struct RandintFn {
  int64_t low;
  uint64_t range;
  __device__ T operator()(const uint32_t* words) const {
    const uint64_t bits = (static_cast<uint64_t>(words[0]) << 32) | words[1];
    return static_cast<T>(low + static_cast<int64_t>(bits % range));
  }
};

}  // namespace

const char* random_uniform(ScalarType type, int64_t numel, void* out, double low, double high, uint64_t seed, uint64_t offset) {
  return dispatch_floating(type, [&](auto zero) {
    using T = decltype(zero);
    return launch_fill<T>(numel, out, seed, offset, UniformFn<T>{low, high});
  });
}

const char* random_normal(ScalarType type, int64_t numel, void* out, double mean, double std, uint64_t seed, uint64_t offset) {
  return dispatch_floating(type, [&](auto zero) {
    using T = decltype(zero);
    return launch_fill<T>(numel, out, seed, offset, NormalFn<T>{mean, std});
  });
}

const char* random_int(ScalarType type, int64_t numel, void* out, int64_t low, uint64_t range, uint64_t seed, uint64_t offset) {
  return dispatch_all(type, [&](auto zero) {
    using T = decltype(zero);
    return launch_fill<T>(numel, out, seed, offset, RandintFn<T>{low, range});
  });
}

}  // namespace flow::cuda
