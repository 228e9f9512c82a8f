#pragma once
#include "core/tensor.h"

namespace flow {

// Fused, in-place SGD step for one parameter: d = grad + weight_decay * param; with momentum,
// buffer = grad-like d on the first step (buffer_initialized=false), else
// momentum * buffer + (1 - dampening) * d, and d = nesterov ? d + momentum * buffer : buffer;
// then param -= lr * d. Writes param (and buffer) in place; needs contiguous tensors of one dtype.
void sgd_update_(Tensor& param, const Tensor& grad, Tensor* momentum_buffer, double lr, double momentum, double dampening,
                 double weight_decay, bool nesterov, bool buffer_initialized);

// Whether sgd_update_ has a kernel for this parameter (device, dtype, layout).
bool sgd_update_supported(const Tensor& param, const Tensor& grad);

}  // namespace flow
