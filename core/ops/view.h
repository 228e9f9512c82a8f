#pragma once
#include <vector>

#include "core/tensor.h"

namespace flow {

// View ops: the result shares storage with the input (no copy), like PyTorch.
// view needs strides compatible with the new shape; reshape copies only when it must.
// One dimension of shape may be -1 and is inferred.
Tensor view(const Tensor& input, const Shape& shape);
Tensor reshape(const Tensor& input, const Shape& shape);
Tensor permute(const Tensor& input, const std::vector<int64_t>& dims);
Tensor transpose(const Tensor& input, int64_t dim0, int64_t dim1);
// Elements start, start+step, ... < end along dim; start/end are clamped like Python slices.
Tensor slice(const Tensor& input, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor narrow(const Tensor& input, int64_t dim, int64_t start, int64_t length);
// Index `index` along dim, removing that dim.
Tensor select(const Tensor& input, int64_t dim, int64_t index);
// Size-1 dims broadcast to shape; -1 keeps a dim's size; new leading dims may be added.
Tensor expand(const Tensor& input, const Shape& shape);
Tensor squeeze(const Tensor& input);
Tensor squeeze(const Tensor& input, int64_t dim);
Tensor unsqueeze(const Tensor& input, int64_t dim);
Tensor flatten(const Tensor& input, int64_t start_dim = 0, int64_t end_dim = -1);

class Attrs;
namespace detail {
// The view a slice op with these attributes makes, built directly (no dispatch): for kernels.
Tensor slice_alias(const Tensor& input, const Attrs& slice_attrs);
}  // namespace detail

}  // namespace flow
