#pragma once
// Loss ops that are primitives rather than compositions of other ops: their gradients are not
// the derivative of any composition that computes their values safely.
#include "core/tensor.h"

namespace flow {

// Element-wise binary cross entropy of probabilities `input` against `target` (same shape and
// dtype): -(target * max(log(input), -100) + (1 - target) * max(log(1 - input), -100)), as
// PyTorch clamps it. Its input gradient is PyTorch's, (input - target) / max(input * (1 - input),
// 1e-12): finite where a probability is exactly 0 or 1. Inputs outside [0, 1] are an error.
Tensor binary_cross_entropy_elementwise(const Tensor& input, const Tensor& target);

}  // namespace flow
