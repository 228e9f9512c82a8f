// cuBLAS is opened on the first GEMM, not at start-up (core/kernels/cuda/cublas_api.h): these run
// without a GPU too, wherever flow is built with CUDA.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "core/allocator.h"
#ifdef FLOW_WITH_CUDA
#include "core/kernels/cuda/cublas_api.h"
#endif

namespace {

bool mapped(const std::string& library) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(library) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST(CublasApi, OpenedOnFirstUseWithEveryFunctionFlowCalls) {
#ifndef FLOW_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  // Without a GPU no GEMM ran before, in this process or in an earlier test of it.
  if (!flow::cuda_is_available()) {
    EXPECT_FALSE(mapped("libcublas")) << "cuBLAS was loaded at start-up";
  }
  const flow::cuda::CublasApi& api = flow::cuda::cublas_api("matmul");
  EXPECT_NE(api.create, nullptr);
  EXPECT_NE(api.sgemm, nullptr);
  EXPECT_NE(api.dgemm, nullptr);
  EXPECT_NE(api.gemm_ex, nullptr);
  EXPECT_TRUE(mapped("libcublas.so"));
  EXPECT_EQ(&flow::cuda::cublas_api("matmul"), &api) << "opened once";
#endif
}
