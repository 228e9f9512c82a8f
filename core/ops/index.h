#pragma once
#include <vector>

#include "core/tensor.h"

namespace flow {

// Joins tensors of equal shape except along dim (dtypes promote).
Tensor cat(const TensorList& tensors, int64_t dim = 0);
// Joins equally shaped tensors along a new dim.
Tensor stack(const TensorList& tensors, int64_t dim = 0);
// Views of split_size elements along dim (the last may be smaller), or of the given sizes.
TensorList split(const Tensor& input, int64_t split_size, int64_t dim = 0);
TensorList split(const Tensor& input, const std::vector<int64_t>& split_sizes, int64_t dim = 0);
// `chunks` views of nearly equal size along dim (fewer if the dim is small), like torch.chunk.
TensorList chunk(const Tensor& input, int64_t chunks, int64_t dim = 0);

// Indices are int64 (int32 accepted); out-of-range indices raise flow::Error naming the index.
Tensor index_select(const Tensor& input, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& input, int64_t dim, const Tensor& index);
// Out-of-place scatter: a copy of input with out[index[i][j]][j] = src[i][j] (dim 0), etc.
Tensor scatter(const Tensor& input, int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter(const Tensor& input, int64_t dim, const Tensor& index, const Scalar& value);
// Same as scatter but sums into out (scatter_add).
Tensor scatter_add(const Tensor& input, int64_t dim, const Tensor& index, const Tensor& src);
// A copy of input with value where mask (bool, broadcast to input) is true.
Tensor masked_fill(const Tensor& input, const Tensor& mask, const Scalar& value);
// int64 class indices -> int64 one-hot with num_classes (inferred as max+1 when -1).
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);

}  // namespace flow
