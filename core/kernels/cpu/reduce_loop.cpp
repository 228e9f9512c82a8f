#include "core/kernels/cpu/reduce_loop.h"

#include <algorithm>

namespace flow::cpu {

ReducePlan make_reduce_plan(const Shape& shape, const std::vector<int64_t>& dims) {
  const int64_t ndim = shape.ndim();
  std::vector<bool> reduced(static_cast<size_t>(ndim), false);
  for (int64_t d : dims) reduced[static_cast<size_t>(d)] = true;
  const Strides strides = contiguous_strides(shape);
  // Merge adjacent dims of the same kind (size-1 dims are dropped: they change nothing).
  std::vector<int64_t> sizes, merged_strides;
  std::vector<bool> kinds;
  for (int64_t d = 0; d < ndim; ++d) {
    if (shape[d] == 1) continue;
    if (!sizes.empty() && kinds.back() == reduced[d]) {
      sizes.back() *= shape[d];
      merged_strides.back() = strides[d];
    } else {
      sizes.push_back(shape[d]);
      merged_strides.push_back(strides[d]);
      kinds.push_back(reduced[d]);
    }
  }
  ReducePlan plan;
  if (sizes.empty()) return plan;  // one element: one output folding a run of length 1
  plan.inner = sizes.back();
  plan.inner_reduced = kinds.back();
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    (kinds[i] ? plan.reduce_sizes : plan.keep_sizes).push_back(sizes[i]);
    (kinds[i] ? plan.reduce_strides : plan.keep_strides).push_back(merged_strides[i]);
  }
  plan.num_outputs = product(plan.keep_sizes) * (plan.inner_reduced ? 1 : plan.inner);
  plan.reduce_count = product(plan.reduce_sizes) * (plan.inner_reduced ? plan.inner : 1);
  if (shape.numel() == 0) {
    // Empty input: outputs (if any) fold nothing.
    int64_t outputs = 1, count = 1;
    for (int64_t d = 0; d < ndim; ++d) (reduced[d] ? count : outputs) *= shape[d];
    plan = ReducePlan();
    plan.num_outputs = outputs;
    plan.reduce_count = count;
    plan.inner = 0;
    plan.keep_sizes = {outputs};
    plan.keep_strides = {0};
  }
  return plan;
}

}  // namespace flow::cpu
