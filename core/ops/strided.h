#pragma once
// Strided views of a whole tensor and their out-of-place writes: what autograd uses to give a
// view's in-place write a history on its base (PyTorch's CopySlices and AsStridedBackward).
#include "core/tensor.h"

namespace flow {

// The view of contiguous `input` with the given sizes and strides, starting `offset` elements
// after input's first element (every element it reaches lies inside input).
Tensor as_strided(const Tensor& input, const Shape& size, const Strides& stride, int64_t offset);
// A contiguous copy of `input` whose elements under as_strided(input, size, stride, offset) are
// replaced by src (of shape `size`); that view must not reach an element twice.
Tensor as_strided_scatter(const Tensor& input, const Tensor& src, const Shape& size, const Strides& stride, int64_t offset);

}  // namespace flow
