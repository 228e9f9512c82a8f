#pragma once
// Launch geometry and error reporting shared by the .cu files: grid-stride kernels of kThreads
// threads per block, and the launch's error as the string the host side turns into flow::Error.
#include <cuda_runtime.h>

#include <cstdint>

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

}  // namespace flow::cuda
