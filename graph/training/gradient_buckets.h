#pragma once
// Training rewrite "gradient_buckets": data parallelism's gradient reduction. The partial-sum
// gradients of broadcast parameters are reduced with one collective per placement and dtype (a
// bucket, as DDP does) instead of one per gradient, each collective paying a fixed cost:
// all-reduced to broadcast, or, under ZeRO-2, reduce-scattered to the rows that the parameter's
// sharded update reads (Optimizer::trace_step).
#include <cstddef>
#include <cstdint>

#include "core/tensor.h"

namespace flow::graph::training {

// Returns the number of buckets (collectives) traced.
size_t reduce_gradients_in_buckets(const TensorList& params, int64_t zero_stage);

}  // namespace flow::graph::training
