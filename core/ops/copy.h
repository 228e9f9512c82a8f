#pragma once
#include "core/tensor.h"

namespace flow {

// A new tensor with the same values, converted to dtype and/or moved to device. Returns the
// input itself when nothing changes, like PyTorch's Tensor.to.
Tensor to(const Tensor& input, DType dtype);
Tensor to(const Tensor& input, Device device);
Tensor contiguous(const Tensor& input);
Tensor clone(const Tensor& input);

namespace detail {
// Contiguous copy of input computed by the copy kernel directly, outside any interpreter or
// autograd: used by interpreters to prepare kernel inputs.
Tensor contiguous_copy(const Tensor& input);
// Runs the copy kernel src -> dst (dst of any strides; src broadcast to dst's shape).
void copy_into(const Tensor& dst, const Tensor& src);
}  // namespace detail

}  // namespace flow
