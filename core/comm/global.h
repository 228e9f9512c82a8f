#pragma once
// Eager SPMD: ops on global tensors. The eager interpreter hands every op with a global input
// here: an sbp signature is picked from the op's sbp slot (the one moving the fewest bytes),
// inputs are boxed to it with the differentiable to_global op, the op's kernel runs on the
// local pieces, and its outputs become global tensors recorded for autograd like any op.
#include "core/op.h"

namespace flow::distributed {

bool any_global(const TensorList& inputs);
TensorList apply_global(const OpDef& op, const TensorList& inputs, const Attrs& attrs);

// The signature the dispatch picks for inputs laid out by input_sbps (one NdSbp each) on a
// placement of `hierarchy`: per hierarchy dimension, the candidate with the lowest boxing cost
// (ties: the fewest inputs converted, then the op's order). Ops without an sbp slot run
// everything broadcast. In-place ops keep the sbp of the inputs they write.
std::vector<NdSbp> pick_signature(const OpDef& op, const std::vector<TensorMeta>& logical_inputs, const Attrs& attrs,
                                  const std::vector<NdSbp>& input_sbps, const Shape& hierarchy, std::vector<NdSbp>* output_sbps);

// The global tensor whose logical value is `whole`, which every rank of the placement passes
// (the same values): each keeps its piece under nd_sbp; a rank off the placement gets a global
// tensor with no piece. How creation ops, Module::to_global and loading a checkpoint into global
// state lay tensors out.
Tensor from_whole(const Tensor& whole, const Placement& placement, const NdSbp& nd_sbp);

// `value` laid out as `target` is: a local value (a whole, logical tensor, as checkpoints hold)
// beside a global target becomes the global tensor of target's placement and sbp (from_whole);
// otherwise value itself. How load_state_dict writes logical tensors into global state.
Tensor laid_out_like(const Tensor& value, const Tensor& target);

// Partial sums made broadcast with one all_reduce for all of them (gradient bucketing): every
// tensor is global with sbp P on the same 1-D placement, and every rank of it calls this. Returns
// the tensors with sbp B, in order. Runs outside autograd.
TensorList all_reduce_partial_sums(const TensorList& partials);

// ZeRO's buckets, each one collective for many tensors on the same 1-D placement (called by every
// rank of it, outside autograd). all_gather_row_splits: tensors split by rows (S(0)) become
// broadcast (B): each member sends its rows of every tensor in one piece. reduce_scatter_partial_sums:
// partial sums (P) become split by rows (S(0)): each member keeps its rows of every sum.
TensorList all_gather_row_splits(const TensorList& row_splits);
TensorList reduce_scatter_partial_sums(const TensorList& partials);

// A global tensor of logical meta `meta` whose piece on this rank is `local` (undefined off the
// placement).
Tensor make_global(const TensorMeta& meta, const Placement& placement, const NdSbp& nd_sbp, const Tensor& local);

}  // namespace flow::distributed
