#pragma once
#include "core/tensor.h"

namespace flow {

// Numerically stable (max-subtracted) softmax and log-softmax along dim.
Tensor softmax(const Tensor& input, int64_t dim);
Tensor log_softmax(const Tensor& input, int64_t dim);

}  // namespace flow
