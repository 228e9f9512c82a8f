#pragma once
// Launch geometry and error reporting shared by the .cu files: grid-stride kernels of kThreads
// threads per block, and the launch's error as the string the host side turns into flow::Error.
#include <cuda_runtime.h>

#include <cstdint>

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
  }
  return "unsupported dtype";
}

template <typename F>
const char* dispatch_floating(ScalarType type, F&& f) {
  switch (type) {
    case ScalarType::kFloat32: return f(float{});
    case ScalarType::kFloat64: return f(double{});
    default: return "unsupported dtype";
  }
}

}  // namespace flow::cuda
