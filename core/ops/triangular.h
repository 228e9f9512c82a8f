#pragma once
#include "core/tensor.h"

namespace flow {

// The lower (tril) or upper (triu) triangle of the last two dims of input (any batch of
// matrices), the other elements zero, as torch.tril / torch.triu: element (i, j) is kept when
// j - i <= diagonal (tril) or j - i >= diagonal (triu). diagonal 0 is the main diagonal, > 0 above
// it, < 0 below it.
Tensor tril(const Tensor& input, int64_t diagonal = 0);
Tensor triu(const Tensor& input, int64_t diagonal = 0);

}  // namespace flow
