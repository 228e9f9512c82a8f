#pragma once
// Boxing: converting a global tensor's pieces from one sbp to another on the same placement
// (OneFlow's oneflow/core/boxing). Each 1-D transition is one collective op (core/ops/comm.h)
// or a local slice; one function composes them over the dimensions of a 2-D placement.
#include "core/tensor.h"

namespace flow::distributed {

// This rank's piece of the logical tensor (shape `logical`) laid out by `dst`, from its piece
// laid out by `src`. Every rank of the placement calls it. Runs on local tensors, outside
// autograd (the global to_global op carries the gradient).
Tensor box(const Tensor& local, const Shape& logical, const Placement& placement, const NdSbp& src, const NdSbp& dst);

// Bytes each rank sends to move a `bytes`-byte logical tensor from src to dst over `parts`
// ranks, by OneFlow's cost model: P->B all-reduce 2(n-1)/n, S->B all-gather and P->S
// reduce-scatter (n-1)/n, S(i)->S(j) all-to-all (n-1)/n^2, B->S and B->P nothing.
double boxing_cost(const Sbp& src, const Sbp& dst, double bytes, int64_t parts);

}  // namespace flow::distributed
