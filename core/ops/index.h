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
// In-place scatter (torch.Tensor.scatter_): writes src into input (contiguous) at index along dim
// and returns input. In a Graph the write lands in the variable or input it names, as copy_ does.
Tensor& scatter_(Tensor& input, int64_t dim, const Tensor& index, const Tensor& src);
// Same as scatter but sums into out (scatter_add).
Tensor scatter_add(const Tensor& input, int64_t dim, const Tensor& index, const Tensor& src);
// The gradient of reading an input of input_shape at index along dim (index of grad's shape), as
// gather does: zeros with grad added at index. One gather_grad op (one tensor); on CUDA, which
// has no kernel for it, and for 0-d inputs, zeros and scatter_add. The vjps of gather and of
// sort/topk's values share it. index_select's keeps zeros and scatter_add: with gather_grad the
// data-parallel GPT-2 plan sent 3 MB more per step (tests/distributed/plan_stats_test.cpp).
Tensor gather_backward(const Tensor& grad, int64_t dim, const Tensor& index, const Shape& input_shape, DType input_dtype);
// A copy of input with value where mask (bool, broadcast to input) is true.
Tensor masked_fill(const Tensor& input, const Tensor& mask, const Scalar& value);
// int64 class indices -> int64 one-hot with num_classes (inferred as max+1 when -1).
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);

}  // namespace flow
