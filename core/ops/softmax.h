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

// Per row of logits (N, C), -log_softmax(logits)[n, labels[n]] (int64 labels in [0, C)), and 0
// where labels[n] == ignore_index (OneFlow's sparse_softmax_cross_entropy): one pass over each
// row, no (N, C) log-probabilities stored, the gradient (softmax - one-hot) written in one pass
// too. Losses in the logits' dtype; under autocast a float16/bfloat16 input gives float32 losses
// (the kernel widens each element as it reads it). A label outside [0, C) other than ignore_index
// throws when the kernel runs. CPU and CUDA kernels (CUDA: one dtype, the widening is CPU-only);
// cross_entropy takes it on the CPU only, log_softmax + nll elsewhere.
Tensor sparse_softmax_cross_entropy(const Tensor& logits, const Tensor& labels, int64_t ignore_index);

}  // namespace flow
