#pragma once
// Element-wise reductions for Gloo's allreduce, per dtype.
#include <cstdint>
#include <functional>

#include "core/comm/process_group.h"
#include "core/dtype.h"

namespace flow::distributed {

// Gloo's reduction signature: out[i] = reduce(a[i], b[i]) for n elements (out may alias a or b).
using ReduceFunction = std::function<void(void*, const void*, const void*, size_t)>;

// avg reduces with sum (the caller divides afterwards). float16/bfloat16 add in float and round
// at every step. flow::Error [op] for bool, which has no arithmetic.
ReduceFunction reduce_function(DType dtype, ReduceOp reduce, const char* op);

// data[i] /= divisor: the second step of avg. Integers divide with C++'s truncation toward zero.
void divide_in_place(void* data, DType dtype, int64_t numel, int64_t divisor);

}  // namespace flow::distributed
