#pragma once
#include <cstdint>

#include "core/ops/reduce.h"  // ValuesIndices
#include "core/random.h"
#include "core/tensor.h"

namespace flow {

// Sorts along dim, as torch.sort: {values, int64 indices into input along dim}. NaN sorts as the
// largest value (last ascending, first descending). Equal elements always keep their input
// order, which is what stable = true asks and a valid order for stable = false.
ValuesIndices sort(const Tensor& input, int64_t dim = -1, bool descending = false, bool stable = false);
// The indices of sort, as torch.argsort.
Tensor argsort(const Tensor& input, int64_t dim = -1, bool descending = false, bool stable = false);
// The k largest (or smallest) elements along dim, as torch.topk: {values, int64 indices}, sorted
// when `sorted`, otherwise in an unspecified order. NaN counts as the largest value; among equal
// elements the first in the input is chosen. 0 <= k <= size of dim (1 for a 0-d input).
ValuesIndices topk(const Tensor& input, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);
// num_samples int64 category indices per row of non-negative weights (1-D: one row; 2-D: one per
// row), as torch.multinomial, drawn from `generator` (the default generator when null). Without replacement the draws are
// distinct, in the order of successive draws each proportional to the remaining weights
// (num_samples <= categories). Weights need not sum to 1, but each row must have a positive sum.
Tensor multinomial(const Tensor& input, int64_t num_samples, bool replacement = false, Generator* generator = nullptr);

}  // namespace flow
