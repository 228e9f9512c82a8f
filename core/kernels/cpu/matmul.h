#pragma once
// CPU GEMM kernels other kernels build on.
#include "core/op.h"

namespace flow::cpu {

// The "linear" kernel: outputs[0] = inputs[0] @ inputs[1]^T (+ inputs[2]), float32 or float64.
void linear_kernel(KernelContext& ctx);

}  // namespace flow::cpu
