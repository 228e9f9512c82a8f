#pragma once
// Launch geometry and error reporting shared by the .cu files: grid-stride kernels of kThreads
// threads per block, and the launch's error as the string the host side turns into flow::Error.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/kernels/cuda/launch.h"

namespace flow::cuda {

constexpr int kThreads = 256;

inline int blocks_for(int64_t numel) {
  const int64_t blocks = (numel + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65535 * 8 ? blocks : 65535 * 8);
}

// nullptr when the last launch succeeded.
inline const char* launch_status() {
  const cudaError_t status = cudaGetLastError();
  return status == cudaSuccess ? nullptr : cudaGetErrorString(status);
}

// Tree sum of one value per thread of a one-dimensional block of a power-of-two size, in a fixed
// order (deterministic); every thread gets the total. shared holds blockDim.x values.
template <typename Acc>
__device__ Acc block_sum(Acc value, Acc* shared) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int width = blockDim.x / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) shared[threadIdx.x] += shared[threadIdx.x + width];
    __syncthreads();
  }
  const Acc total = shared[0];
  __syncthreads();  // shared is reused by the caller's next round
  return total;
}

// One block per output of a reduction, up to the grid's limit (the kernels stride over the rest).
inline int blocks_for_outputs(int64_t outputs) { return static_cast<int>(outputs < 65535 * 64 ? outputs : 65535 * 64); }

// Calls f(T{}) for the C++ type T of `type` and returns its status.
template <typename F>
const char* dispatch_all(ScalarType type, F&& f) {
  switch (type) {
    case ScalarType::kFloat32: return f(float{});
    case ScalarType::kFloat64: return f(double{});
    case ScalarType::kInt64: return f(int64_t{});
    case ScalarType::kInt32: return f(int32_t{});
    case ScalarType::kUInt8: return f(uint8_t{});
    case ScalarType::kInt8: return f(int8_t{});
    case ScalarType::kBool: return f(bool{});
    case ScalarType::kFloat16:
    case ScalarType::kBFloat16: break;  // dispatch_with_reduced
  }
  return "unsupported dtype";
}

// f(__half{}) or f(__nv_bfloat16{}) for the 16-bit floating types (kernels that compute them in
// float), dispatch(type, f) for the others.
template <typename F, typename Dispatch>
const char* with_reduced(ScalarType type, F&& f, Dispatch&& dispatch) {
  if (type == ScalarType::kFloat16) return f(__half{});
  if (type == ScalarType::kBFloat16) return f(__nv_bfloat16{});
  return dispatch(type, f);
}

template <typename F>
const char* dispatch_with_reduced(ScalarType type, F&& f) {
  return with_reduced(type, f, [](ScalarType t, auto& g) { return dispatch_all(t, g); });
}

template <typename T>
inline constexpr bool is_reduced_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

// The type T computes in: float for the 16-bit types, T itself otherwise.
template <typename T>
using compute_t = std::conditional_t<is_reduced_v<T>, float, T>;

// Element i of floating (or bool) data whose type is known only at run time, as C; 16-bit values
// widen exactly. For kernels whose operands may each have their own dtype (a uniform branch).
template <typename C>
__device__ C load_as(const void* data, ScalarType type, int64_t i) {
  switch (type) {
    case ScalarType::kFloat32: return static_cast<C>(static_cast<const float*>(data)[i]);
    case ScalarType::kFloat64: return static_cast<C>(static_cast<const double*>(data)[i]);
    case ScalarType::kFloat16: return static_cast<C>(__half2float(static_cast<const __half*>(data)[i]));
    case ScalarType::kBFloat16: return static_cast<C>(__bfloat162float(static_cast<const __nv_bfloat16*>(data)[i]));
    case ScalarType::kBool: return static_cast<C>(static_cast<const bool*>(data)[i]);
    default: return C(0);  // the hosts pass floating and bool types only
  }
}

// Writes value to element i, rounded (to nearest even) for the 16-bit types.
template <typename C>
__device__ void store_as(void* data, ScalarType type, int64_t i, C value) {
  switch (type) {
    case ScalarType::kFloat32: static_cast<float*>(data)[i] = static_cast<float>(value); return;
    case ScalarType::kFloat64: static_cast<double*>(data)[i] = static_cast<double>(value); return;
    case ScalarType::kFloat16: static_cast<__half*>(data)[i] = __float2half_rn(static_cast<float>(value)); return;
    case ScalarType::kBFloat16: static_cast<__nv_bfloat16*>(data)[i] = __float2bfloat16_rn(static_cast<float>(value)); return;
    default: return;
  }
}

template <typename F>
const char* dispatch_floating(ScalarType type, F&& f) {
  switch (type) {
    case ScalarType::kFloat32: return f(float{});
    case ScalarType::kFloat64: return f(double{});
    default: return "unsupported dtype";
  }
}

template <typename F>
const char* dispatch_floating_with_reduced(ScalarType type, F&& f) {
  return with_reduced(type, f, [](ScalarType t, auto& g) { return dispatch_floating(t, g); });
}

}  // namespace flow::cuda
