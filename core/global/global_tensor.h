#pragma once
// Global tensors: a logical tensor laid out over a placement by an sbp, each rank holding its
// piece. global_tensor.cpp defines what core/tensor.h declares of them (Tensor::to_global,
// to_local, placement, sbp; distributed::make_global, from_whole).
#include "core/op.h"

namespace flow::distributed {

// `value` laid out as `target` is: a local value (a whole, logical tensor, as checkpoints hold)
// beside a global target becomes the global tensor of target's placement and sbp (from_whole);
// otherwise value itself. How load_state_dict writes logical tensors into global state.
Tensor laid_out_like(const Tensor& value, const Tensor& target);

// Runs one of the conversion ops (to_global between sbps or placements, local_to_global,
// global_to_local; OpDef::global_conversion): dispatch_global's path for them.
TensorList convert_global(const OpDef& op, const TensorList& inputs, const Attrs& attrs);

}  // namespace flow::distributed
