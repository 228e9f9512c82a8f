#pragma once
// Global tensors: a logical tensor laid out over a placement by an sbp, each rank holding its
// piece (Tensor::to_global / to_local / placement / sbp are defined in global_tensor.cpp).
#include "core/op.h"

namespace flow::distributed {

// A global tensor of logical meta `meta` whose piece on this rank is `local` (undefined off the
// placement).
Tensor make_global(const TensorMeta& meta, const Placement& placement, const NdSbp& nd_sbp, const Tensor& local);

// The global tensor whose logical value is `whole`, which every rank of the placement passes
// (the same values): each keeps its piece under nd_sbp; a rank off the placement gets a global
// tensor with no piece. How creation ops, Module::to_global and loading a checkpoint into global
// state lay tensors out.
Tensor from_whole(const Tensor& whole, const Placement& placement, const NdSbp& nd_sbp);

// `value` laid out as `target` is: a local value (a whole, logical tensor, as checkpoints hold)
// beside a global target becomes the global tensor of target's placement and sbp (from_whole);
// otherwise value itself. How load_state_dict writes logical tensors into global state.
Tensor laid_out_like(const Tensor& value, const Tensor& target);

// Runs one of the conversion ops (to_global between sbps or placements, local_to_global,
// global_to_local; OpDef::global_conversion): dispatch_global's path for them.
TensorList convert_global(const OpDef& op, const TensorList& inputs, const Attrs& attrs);

}  // namespace flow::distributed
