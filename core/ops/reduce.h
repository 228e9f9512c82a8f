#pragma once
#include <optional>
#include <vector>

#include "core/tensor.h"

namespace flow {

// Reductions over `dims` (all dims when empty); keepdim keeps reduced dims with size 1.
// sum/prod of integers give int64, mean/var/std need floating inputs.
Tensor sum(const Tensor& input, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& input, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor prod(const Tensor& input, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// Population (correction 0) or sample (correction 1, the default) variance.
Tensor var(const Tensor& input, const std::vector<int64_t>& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& input, const std::vector<int64_t>& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor logsumexp(const Tensor& input, const std::vector<int64_t>& dims, bool keepdim = false);

// Sums grad over the dims that broadcasting expanded, giving a tensor of `shape` (the
// gradient of a broadcast operand).
Tensor sum_to(const Tensor& grad, const Shape& shape);
// True when every element is nonzero / some element is nonzero.
bool all(const Tensor& input);
bool any(const Tensor& input);

// Maximum/minimum of all elements (0-d result).
Tensor max(const Tensor& input);
Tensor min(const Tensor& input);
// Along one dim: {values, indices}; the first index wins ties.
struct ValuesIndices {
  Tensor values;
  Tensor indices;
};
ValuesIndices max(const Tensor& input, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& input, int64_t dim, bool keepdim = false);
// Index of the max/min along dim (int64); without dim, into the flattened tensor.
Tensor argmax(const Tensor& input, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& input, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);

}  // namespace flow
