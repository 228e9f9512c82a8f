#pragma once
#include "core/tensor.h"

namespace flow {

// torch.matmul semantics: 1-d x 1-d dot, 2-d x 2-d matrix product, batched with broadcast batch
// dims for >2-d, 1-d operands promoted and squeezed. GEMM runs in OpenBLAS (cuBLAS on CUDA).
Tensor matmul(const Tensor& a, const Tensor& b);
// Batched matrix product of (B,n,k) and (B,k,m) without broadcasting.
Tensor bmm(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);
// y = x @ weight^T + bias, weight of shape (out_features, in_features).
Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace flow
