#pragma once
// CPU GEMM kernels other kernels build on.
#include "core/op.h"

namespace flow::cpu {

// The "matmul" kernel: outputs[0] = inputs[0] @ inputs[1] over broadcast batch dims, float32 or
// float64, operands of any strides.
void matmul_kernel(KernelContext& ctx);

// The "linear" kernel: outputs[0] = inputs[0] @ inputs[1]^T (+ inputs[2]), float32 or float64.
void linear_kernel(KernelContext& ctx);

// The product through oneDNN where it has kernels worth taking on this CPU: bfloat16 operands
// wherever it multiplies them natively (AVX512-BF16, AMX), float32 with its brgemm kernels only
// (AVX-512 and up, where they beat OpenBLAS; on AVX2 its GEMM does not). out is float32 or the
// operands' dtype. False where oneDNN has no such kernel: the caller computes the product itself.
bool onednn_matmul(const Tensor& a, const Tensor& b, Tensor& out);
// x @ w^T (+ bias, when defined), x (rows x in) and w (out x in) contiguous.
bool onednn_linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out);

// One product of a kernel that tiles its own work, run on the calling thread (inside the kernel's
// own parallel region): c (m x n, float32, rows ldc apart) = alpha * op(a) @ op(b) + beta * c, beta
// 0 or 1. a is m x k (k x m when trans_a) and b k x n (n x k when trans_b), row-major with rows
// lda / ldb apart, both `operands` (float32 or bfloat16). Through oneDNN where onednn_matmul would
// take the product; false otherwise (nothing written): the caller computes it.
bool onednn_tile_product(DType operands, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void* a,
                         int64_t lda, const void* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Multiply-adds below which a product is not worth another thread (oneDNN runs a product on the
// caller's whole team, and on small products a large team costs more than it saves: a 16-vCPU
// Xeon took 0.86 ms per 64x784x512 call on 16 threads, 0.3 ms on one). Both the oneDNN and the
// BLAS paths give each thread at least this much of a product.
inline constexpr int64_t kMinProductMacsPerThread = 2'000'000;

// Element offsets of each output batch into an operand whose batch dims broadcast to out_batch.
std::vector<int64_t> batch_offsets(const Tensor& operand, const Shape& out_batch);

}  // namespace flow::cpu
