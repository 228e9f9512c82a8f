#pragma once
// cuBLAS, opened on the first GEMM instead of linked: linking it loads libcublasLt, whose start-up
// cost every flow process about half a second of CPU time, on machines without a GPU too (a
// program linking the CUDA runtime and cuDNN started in 10 ms, the same with cuBLAS in 530 ms).
#include <cublas_v2.h>

namespace flow::cuda {

// The cuBLAS functions flow calls (the names cublas_v2.h maps cublasCreate, cublasSgemm and
// cublasDgemm to, and the C API's cublasGemmEx).
struct CublasApi {
  cublasStatus_t (*create)(cublasHandle_t*);
  decltype(&cublasSgemm_v2) sgemm;
  decltype(&cublasDgemm_v2) dgemm;
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*, cudaDataType,
                            int, const void*, cudaDataType, int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t);
};

// libcublas.so.<the major version built against>, from the loader's search path or else beside
// the CUDA runtime flow loaded; opened once. Throws flow::Error naming `op` when it cannot be.
const CublasApi& cublas_api(const char* op);

}  // namespace flow::cuda
