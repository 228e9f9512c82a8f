#pragma once
#include "core/tensor.h"

namespace flow {

// Numerically stable (max-subtracted) softmax and log-softmax along dim.
Tensor softmax(const Tensor& input, int64_t dim);
Tensor log_softmax(const Tensor& input, int64_t dim);
// The same on input cast to dtype first (PyTorch's dtype argument); a float16/bfloat16 input with
// dtype float32 is widened by the CPU kernel element by element, with the same result.
Tensor softmax(const Tensor& input, int64_t dim, DType dtype);
Tensor log_softmax(const Tensor& input, int64_t dim, DType dtype);

}  // namespace flow
