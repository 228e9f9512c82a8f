#pragma once
// Convolution as im2col + BLAS GEMM (conv.cpp): float64's kernels, and the weight gradient of
// float32 convolutions that oneDNN's blocked layouts would pad.
#include "core/op.h"

namespace flow::cpu {

// conv2d_grad_weight (inputs: grad, input; output: the weight's gradient) in float32 or float64:
// per image (in order) and group, the input's patches and one GEMM accumulating into the result.
void conv_grad_weight_by_gemm(KernelContext& ctx);

}  // namespace flow::cpu
