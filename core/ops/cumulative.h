#pragma once
#include <optional>

#include "core/tensor.h"

namespace flow {

// Running sums along dim, as torch.cumsum: out[..., i, ...] = sum of input[..., :i+1, ...].
// With dtype the input is cast to it first; without, integer and bool inputs sum in int64.
// float32 (and float16/bfloat16) inputs accumulate in float64, as PyTorch's CPU kernel does, so a
// long float32 sum is as accurate as its final rounding.
Tensor cumsum(const Tensor& input, int64_t dim, std::optional<DType> dtype = std::nullopt);

}  // namespace flow
