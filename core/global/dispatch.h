#pragma once
// Eager SPMD: ops on global tensors. flow::apply (core/interpreter.cpp), the one dispatch point,
// hands every op with a global input here through Interpreter::apply_global: an sbp signature is
// picked from the op's sbp slot (the one moving the fewest bytes), inputs are boxed to it with the
// differentiable to_global op, the current interpreter runs (eager) or records (tracing) the op
// on the local pieces, and its outputs become global tensors recorded for autograd like any op.
#include "core/op.h"

namespace flow::distributed {

// Whether an op with these inputs goes through dispatch_global (a defined global input).
bool any_global(const TensorList& inputs);
TensorList dispatch_global(const OpDef& op, const TensorList& inputs, const Attrs& attrs);

// The signature the dispatch picks for inputs laid out by input_sbps (one NdSbp each) on a
// placement of `hierarchy`: per hierarchy dimension, the candidate with the lowest boxing cost
// (ties: the fewest inputs converted, then the op's order). Ops without an sbp slot run
// everything broadcast. In-place ops keep the sbp of the inputs they write.
std::vector<NdSbp> pick_signature(const OpDef& op, const std::vector<TensorMeta>& logical_inputs, const Attrs& attrs,
                                  const std::vector<NdSbp>& input_sbps, const Shape& hierarchy, std::vector<NdSbp>* output_sbps);

}  // namespace flow::distributed
