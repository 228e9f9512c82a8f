#pragma once
// CPU GEMM kernels other kernels build on.
#include "core/op.h"

namespace flow::cpu {

// The "matmul" kernel: outputs[0] = inputs[0] @ inputs[1] over broadcast batch dims, float32 or
// float64, operands of any strides.
void matmul_kernel(KernelContext& ctx);

// The "linear" kernel: outputs[0] = inputs[0] @ inputs[1]^T (+ inputs[2]), float32 or float64.
void linear_kernel(KernelContext& ctx);

// Element offsets of each output batch into an operand whose batch dims broadcast to out_batch.
std::vector<int64_t> batch_offsets(const Tensor& operand, const Shape& out_batch);

}  // namespace flow::cpu
