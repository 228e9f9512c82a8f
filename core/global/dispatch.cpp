// The SPMD dispatch: an op on global tensors runs as the op on their pieces, after boxing the
// inputs to the sbp signature that moves the fewest bytes.
#include "core/global/dispatch.h"

#include <glog/logging.h>

#include <algorithm>
#include <limits>

#include "core/comm/process_group.h"
#include "core/global/boxing.h"
#include "core/global/global_tensor.h"
#include "core/grad_mode.h"
#include "core/interpreter.h"

namespace flow::distributed {
namespace {

TensorMeta meta_of(const Tensor& t) { return {t.shape(), t.dtype(), t.device()}; }

// An op with a shape attribute ("shape", "input_shape", ...) that is its output's shape (view,
// expand, the gradients of pooling and convolution) makes this rank's piece of that output: its
// piece's shape.
Attrs attrs_for_piece(const Attrs& attrs, const std::vector<TensorMeta>& out_metas, const Placement& placement,
                      const std::vector<NdSbp>& out_sbps) {
  if (out_metas.size() != 1) return attrs;
  Attrs piece = attrs;
  for (const auto& [name, value] : attrs.values()) {
    const auto* shape = std::get_if<std::vector<int64_t>>(&value);
    const bool names_a_shape = name.size() >= 5 && name.compare(name.size() - 5, 5, "shape") == 0;
    if (!names_a_shape || shape == nullptr || !(Shape(*shape) == out_metas[0].shape)) continue;
    piece.set(name, local_shape(out_metas[0].shape, placement, out_sbps[0], placement.index_of(get_rank())));
  }
  return piece;
}

}  // namespace

bool any_global(const TensorList& inputs) {
  return std::any_of(inputs.begin(), inputs.end(), [](const Tensor& t) { return t.defined() && t.is_global(); });
}

std::vector<NdSbp> pick_signature(const OpDef& op, const std::vector<TensorMeta>& logical_inputs, const Attrs& attrs,
                                  const std::vector<NdSbp>& input_sbps, const Shape& hierarchy, std::vector<NdSbp>* output_sbps) {
  std::vector<SbpSignature> candidates;
  if (op.sbp) candidates = op.sbp(logical_inputs, attrs);
  const size_t num_outputs = op.output_names.size();
  if (candidates.empty()) {
    candidates.push_back({std::vector<Sbp>(logical_inputs.size(), Sbp::broadcast()), std::vector<Sbp>(num_outputs, Sbp::broadcast())});
  }
  std::vector<NdSbp> inputs(logical_inputs.size()), outputs(num_outputs);
  for (int64_t d = 0; d < hierarchy.ndim(); ++d) {
    const SbpSignature* best = nullptr;
    double best_cost = std::numeric_limits<double>::infinity();
    for (const SbpSignature& candidate : candidates) {
      CHECK_EQ(candidate.inputs.size(), logical_inputs.size()) << op.name;
      // Checked against every rank of the placement: a split in one dimension of a 2-D placement
      // is cut further by the others.
      if (op.sbp_holds && !op.sbp_holds(logical_inputs, attrs, candidate, hierarchy.numel())) continue;
      double cost = 0;
      bool keeps_inplace = true;
      for (size_t i = 0; i < logical_inputs.size(); ++i) {
        const Sbp& current = input_sbps[i][static_cast<size_t>(d)];
        if (op.inplace && i < num_outputs && !(candidate.inputs[i] == current)) keeps_inplace = false;
        const double bytes = static_cast<double>(logical_inputs[i].shape.numel()) * static_cast<double>(itemsize(logical_inputs[i].dtype));
        // A converted input costs at least a little, so that a free slice loses to no conversion.
        if (!(candidate.inputs[i] == current)) cost += boxing_cost(current, candidate.inputs[i], bytes, hierarchy[d]) + 1e-3;
      }
      if (keeps_inplace && cost < best_cost) {
        best = &candidate;
        best_cost = cost;
      }
    }
    if (best == nullptr) {
      fail(op.name, "writes its input in place, and no sbp signature of the op keeps that input's sbp ",
           nd_sbp_str(input_sbps[0]));
    }
    for (size_t i = 0; i < inputs.size(); ++i) inputs[i].push_back(best->inputs[i]);
    for (size_t o = 0; o < outputs.size(); ++o) outputs[o].push_back(best->outputs[o]);
  }
  *output_sbps = std::move(outputs);
  return inputs;
}

namespace {

// A 0-d local tensor beside global inputs (a scalar such as where()'s fill value) is taken as
// broadcast on their placement: the same value on every rank.
TensorList with_scalars_broadcast(const TensorList& inputs) {
  const auto global = std::find_if(inputs.begin(), inputs.end(), [](const Tensor& t) { return t.defined() && t.is_global(); });
  TensorList lifted = inputs;
  for (Tensor& t : lifted) {
    if (t.defined() && !t.is_global() && t.dim() == 0) {
      t = from_whole(t, global->placement(), broadcast_sbp(global->placement()));
    }
  }
  return lifted;
}

}  // namespace

TensorList dispatch_global(const OpDef& op, const TensorList& given, const Attrs& attrs) {
  if (op.global_conversion) return convert_global(op, given, attrs);
  const TensorList inputs = with_scalars_broadcast(given);
  const Placement* placement = nullptr;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) fail(op.name, "input ", i, " is an undefined tensor");
    if (!inputs[i].is_global()) {
      fail(op.name, "input ", i, " is a local tensor and another input is global; make it global with to_global() first");
    }
    if (placement == nullptr) placement = &inputs[i].placement();
    if (!(inputs[i].placement() == *placement)) {
      fail(op.name, "inputs are on different placements: ", placement->str(), " and ", inputs[i].placement().str());
    }
  }
  std::vector<TensorMeta> logical;
  std::vector<NdSbp> current;
  for (const Tensor& input : inputs) {
    logical.push_back(meta_of(input));
    current.push_back(input.sbp());
  }
  const std::vector<TensorMeta> out_metas = check_and_infer(op, inputs, attrs);
  std::vector<NdSbp> out_sbps;
  const std::vector<NdSbp> wanted = pick_signature(op, logical, attrs, current, placement->hierarchy(), &out_sbps);
  TensorList boxed;
  for (size_t i = 0; i < inputs.size(); ++i) {
    boxed.push_back(current[i] == wanted[i] ? inputs[i] : inputs[i].to_global(*placement, wanted[i]));
  }
  TensorList outputs;
  if (op.inplace) {
    outputs.assign(boxed.begin(), boxed.begin() + static_cast<std::ptrdiff_t>(out_metas.size()));
  }
  TensorList local_outputs;
  if (placement->contains(get_rank())) {
    TensorList locals;
    for (const Tensor& input : boxed) locals.push_back(input.impl()->global->local);
    const Attrs local_attrs = attrs_for_piece(attrs, out_metas, *placement, out_sbps);
    // The interpreter runs (eager) or records (tracing a Graph) the op on the pieces; autograd
    // records the global op below, not this one.
    autograd::NoGradGuard no_grad;
    local_outputs = current_interpreter().apply(op, locals, local_attrs);
  }
  if (!op.inplace) {
    for (size_t o = 0; o < out_metas.size(); ++o) {
      outputs.push_back(make_global(out_metas[o], *placement, out_sbps[o], local_outputs.empty() ? Tensor() : local_outputs[o]));
    }
  }
  record_for_autograd(op, boxed, outputs, attrs);
  return outputs;
}

}  // namespace flow::distributed
