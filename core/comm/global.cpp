#include "core/comm/global.h"

#include <glog/logging.h>

#include <algorithm>
#include <limits>

#include "core/comm/boxing.h"
#include "core/grad_mode.h"
#include "core/interpreter.h"
#include "core/ops/comm.h"
#include "core/ops/creation.h"
#include "core/ops/index.h"
#include "core/ops/view.h"

namespace flow::distributed {
namespace {

Placement placement_attr(const Attrs& attrs, const char* op) { return Placement::parse(attrs.get<std::string>("placement"), op); }
NdSbp sbp_attr(const Attrs& attrs, const char* name, const char* op) { return parse_nd_sbp(attrs.get<std::string>(name), op); }

// global -> global with another sbp (boxing), or on another placement.
const OpDef& kToGlobal =
    OpBuilder("to_global")
        .inputs({"input"})
        .outputs({"out"})
        .attrs({{"placement", AttrType::kString},
                {"sbp", AttrType::kString},
                {"src_placement", AttrType::kString},
                {"src_sbp", AttrType::kString}})
        .global_conversion()
        .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          const Placement placement = placement_attr(attrs, "to_global");
          check_nd_sbp(placement, sbp_attr(attrs, "sbp", "to_global"), in[0].shape, "to_global");
          check_nd_sbp(Placement::parse(attrs.get<std::string>("src_placement"), "to_global"), sbp_attr(attrs, "src_sbp", "to_global"),
                       in[0].shape, "to_global");
          return std::vector<TensorMeta>{{in[0].shape, in[0].dtype, placement.device_for(get_rank())}};
        })
        .vjp([](const VjpContext& ctx) {
          // The gradient is laid out as the input was, except that a partial-sum input gets a
          // broadcast gradient (OneFlow's dual sbp): every piece of a sum has the whole
          // gradient, and a partial-sum gradient would cost an all-reduce later.
          NdSbp grad_sbp = sbp_attr(ctx.attrs, "src_sbp", "to_global");
          for (Sbp& sbp : grad_sbp) sbp = sbp.is_partial_sum() ? Sbp::broadcast() : sbp;
          return TensorList{ctx.grad().to_global(Placement::parse(ctx.attrs.get<std::string>("src_placement"), "to_global"), grad_sbp)};
        })
        .def();

// local piece -> global tensor of logical shape `shape`.
const OpDef& kLocalToGlobal =
    OpBuilder("local_to_global")
        .inputs({"input"})
        .outputs({"out"})
        .attrs({{"placement", AttrType::kString}, {"sbp", AttrType::kString}, {"shape", AttrType::kInts}})
        .global_conversion()
        .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          const Placement placement = placement_attr(attrs, "to_global");
          const NdSbp nd_sbp = sbp_attr(attrs, "sbp", "to_global");
          const Shape logical(attrs.get<std::vector<int64_t>>("shape"));
          check_nd_sbp(placement, nd_sbp, logical, "to_global");
          const int64_t index = placement.index_of(get_rank());
          if (index < 0) fail("to_global", "rank ", get_rank(), " is not in ", placement.str());
          const Shape expected = local_shape(logical, placement, nd_sbp, index);
          if (!(expected == in[0].shape)) {
            fail("to_global", "rank ", get_rank(), "'s piece has shape ", in[0].shape, " but a ", logical, " tensor with sbp ",
                 nd_sbp_str(nd_sbp), " on ", placement.str(), " gives it ", expected,
                 " (split pieces are balanced: the first size % n are one longer)");
          }
          return std::vector<TensorMeta>{{logical, in[0].dtype, in[0].device}};
        })
        .vjp([](const VjpContext& ctx) {
          return TensorList{
              ctx.grad().to_global(placement_attr(ctx.attrs, "to_global"), sbp_attr(ctx.attrs, "sbp", "to_global")).to_local()};
        })
        .def();

// global tensor -> this rank's piece.
const OpDef& kGlobalToLocal =
    OpBuilder("global_to_local")
        .inputs({"input"})
        .outputs({"out"})
        .attrs({{"placement", AttrType::kString}, {"sbp", AttrType::kString}})
        .global_conversion()
        .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          const Placement placement = placement_attr(attrs, "to_local");
          const NdSbp nd_sbp = sbp_attr(attrs, "sbp", "to_local");
          check_nd_sbp(placement, nd_sbp, in[0].shape, "to_local");
          const int64_t index = placement.index_of(get_rank());
          const Shape shape = index < 0 ? Shape{0} : local_shape(in[0].shape, placement, nd_sbp, index);
          return std::vector<TensorMeta>{{shape, in[0].dtype, in[0].device}};
        })
        .vjp([](const VjpContext& ctx) {
          const Shape logical = ctx.input_meta(0).shape;
          Attrs attrs = Attrs().set("placement", ctx.attrs.get<std::string>("placement")).set("sbp", ctx.attrs.get<std::string>("sbp"));
          attrs.set("shape", logical);
          return TensorList{apply_one(kLocalToGlobal, {ctx.grad()}, attrs)};
        })
        .def();

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

void record(const OpDef& op, const TensorList& inputs, const TensorList& outputs, const Attrs& attrs) {
  if (AutogradRecorder* recorder = autograd_recorder()) recorder->record(op, inputs, outputs, attrs);
}

// This rank's piece (undefined off `placement`) of `input` moved to another placement: the
// source ranks gather the whole tensor and, unless every destination rank is one of them, the
// first of them sends it to each destination rank outside the source placement (point to point,
// so a Graph runs the transfer on its own threads: job/plan.h); each destination rank keeps its
// piece under `dst`. Simple rather than minimal: a split moving between equal-sized rank sets
// could send pieces pairwise.
Tensor move_between_placements(const Tensor& input, const Placement& placement, const NdSbp& dst) {
  const Placement& source = input.placement();
  const int64_t rank = get_rank();
  if (!source.contains(rank) && !placement.contains(rank)) return Tensor();
  autograd::NoGradGuard no_grad;
  const Shape& logical = input.shape();
  const int64_t root = source.ranks().front();
  Tensor whole;
  if (source.contains(rank)) {
    whole = box(input.impl()->global->local, logical, source, input.sbp(), broadcast_sbp(source));
    if (rank == root) {
      const Tensor sent = whole.contiguous();
      for (int64_t peer : placement.ranks()) {
        if (!source.contains(peer)) send(sent, peer);
      }
    }
  } else {
    whole = recv(logical, input.dtype(), placement.device_for(rank), root);
  }
  if (!placement.contains(rank)) return Tensor();
  return box(whole, logical, placement, broadcast_sbp(placement), dst);
}

TensorList run_conversion(const OpDef& op, const TensorList& inputs, const Attrs& attrs) {
  const TensorMeta out_meta = check_and_infer(op, inputs, attrs)[0];
  const Tensor& input = inputs[0];
  Tensor out;
  if (&op == &kLocalToGlobal) {
    if (input.is_global()) fail("to_global", "input is already global");
    out = make_global(out_meta, placement_attr(attrs, "to_global"), sbp_attr(attrs, "sbp", "to_global"), input.detach());
  } else if (&op == &kGlobalToLocal) {
    if (!input.is_global()) fail("to_local", "input is a local tensor");
    const Tensor& local = input.impl()->global->local;
    out = local.defined() ? local.detach() : zeros(out_meta.shape, TensorOptions().dtype(out_meta.dtype).device(out_meta.device));
  } else {
    CHECK(&op == &kToGlobal) << op.name;
    if (!input.is_global()) fail("to_global", "input is a local tensor");
    const Placement placement = placement_attr(attrs, "to_global");
    const NdSbp dst = sbp_attr(attrs, "sbp", "to_global");
    const Tensor& local = input.impl()->global->local;
    Tensor moved;
    if (placement == input.placement()) {
      if (local.defined()) moved = box(local, input.shape(), placement, input.sbp(), dst);
    } else {
      moved = move_between_placements(input, placement, dst);
    }
    out = make_global(out_meta, placement, dst, moved);
  }
  const TensorList outputs{out};
  record(op, inputs, outputs, attrs);
  return outputs;
}

// The logical shape of the tensor whose piece on this rank is `local`: pieces' sizes along
// split axes are exchanged among the placement's ranks (they may be uneven).
Shape logical_shape_of(const Tensor& local, const Placement& placement, const NdSbp& nd_sbp) {
  const bool any_split = std::any_of(nd_sbp.begin(), nd_sbp.end(), [](const Sbp& s) { return s.is_split(); });
  if (!any_split) return local.shape();
  Ranks members = placement.ranks();
  std::sort(members.begin(), members.end());
  Tensor mine = tensor(local.shape().vec(), Shape{1, local.dim()});
  const Tensor gathered = all_gather(mine, members).contiguous();
  const int64_t* sizes = gathered.data_ptr<int64_t>();
  Shape logical = local.shape();
  for (int64_t axis = 0; axis < local.dim(); ++axis) {
    std::vector<bool> splits_axis(nd_sbp.size(), false);
    for (size_t d = 0; d < nd_sbp.size(); ++d) splits_axis[d] = nd_sbp[d].is_split() && nd_sbp[d].axis == axis;
    if (std::none_of(splits_axis.begin(), splits_axis.end(), [](bool b) { return b; })) continue;
    int64_t total = 0;
    for (int64_t index = 0; index < placement.size(); ++index) {
      // Count each piece along the splitting dimensions once: the other coordinates at 0.
      const std::vector<int64_t> coords = placement.coordinates(index);
      bool counted = true;
      for (size_t d = 0; d < coords.size(); ++d) counted = counted && (splits_axis[d] || coords[d] == 0);
      if (!counted) continue;
      const int64_t rank = placement.ranks()[static_cast<size_t>(index)];
      const int64_t row = std::lower_bound(members.begin(), members.end(), rank) - members.begin();
      total += sizes[row * local.dim() + axis];
    }
    logical[static_cast<size_t>(axis)] = total;
  }
  return logical;
}

}  // namespace

bool any_global(const TensorList& inputs) {
  return std::any_of(inputs.begin(), inputs.end(), [](const Tensor& t) { return t.defined() && t.is_global(); });
}

Tensor from_whole(const Tensor& whole, const Placement& placement, const NdSbp& nd_sbp) {
  if (!placement.contains(get_rank())) return make_global({whole.shape(), whole.dtype(), whole.device()}, placement, nd_sbp, Tensor());
  return whole.to_global(placement, NdSbp(nd_sbp.size(), Sbp::broadcast())).to_global(placement, nd_sbp);
}

Tensor laid_out_like(const Tensor& value, const Tensor& target) {
  return target.is_global() && !value.is_global() ? from_whole(value, target.placement(), target.sbp()) : value;
}

namespace {

// The placement every tensor of a bucket shares, each laid out as `layout` on it (a 1-D sbp). Its
// ranks are in increasing order, as boxing needs them: member i of a collective holds piece i.
const Placement& bucket_placement(const TensorList& bucket, const NdSbp& layout, const char* op) {
  const Placement& placement = bucket[0].placement();
  for (const Tensor& t : bucket) {
    if (!(t.placement() == placement) || !(t.sbp() == layout)) {
      fail(op, "bucketed tensors must have sbp ", nd_sbp_str(layout), " on one 1-D placement, got sbp ", nd_sbp_str(t.sbp()), " on ",
           t.placement().str());
    }
  }
  if (!std::is_sorted(placement.ranks().begin(), placement.ranks().end())) {
    fail(op, "bucketing needs the ranks of ", placement.str(), " in increasing order");
  }
  return placement;
}

Tensor local_piece(const Tensor& t) { return t.impl()->global->local; }

// How a bucket of tensors split by rows over a 1-D placement travels as one flat piece per member:
// member m sends its rows of tensor 0, then of tensor 1, ...: elements[m][i] elements of tensor i,
// starting at offsets[m][i] of its piece.
struct RowBucket {
  std::vector<std::vector<int64_t>> elements;  // [member][tensor]
  std::vector<std::vector<int64_t>> offsets;   // [member][tensor], within the member's piece
  std::vector<int64_t> piece_elements;         // per member

  RowBucket(const TensorList& tensors, const Placement& placement) {
    for (int64_t m = 0; m < placement.size(); ++m) {
      int64_t offset = 0;
      elements.emplace_back();
      offsets.emplace_back();
      for (const Tensor& t : tensors) {
        const int64_t count = local_shape(t.shape(), placement, NdSbp{sbp::split(0)}, m).numel();
        offsets.back().push_back(offset);
        elements.back().push_back(count);
        offset += count;
      }
      piece_elements.push_back(offset);
    }
  }
};

}  // namespace

TensorList all_reduce_partial_sums(const TensorList& partials) {
  if (partials.empty()) return {};
  const NdSbp broadcast{Sbp::broadcast()};
  const Placement& placement = bucket_placement(partials, NdSbp{Sbp::partial_sum()}, "all_reduce");
  autograd::NoGradGuard no_grad;
  TensorList out(partials.size());
  if (placement.contains(get_rank())) {
    TensorList pieces;
    for (const Tensor& t : partials) pieces.push_back(local_piece(t).reshape({-1}));
    const Tensor reduced = all_reduce(cat(pieces, 0), ReduceOp::kSum, placement.ranks());
    int64_t offset = 0;
    for (size_t i = 0; i < partials.size(); ++i) {
      const int64_t count = pieces[i].numel();
      out[i] = reduced.narrow(0, offset, count).reshape(partials[i].shape());
      offset += count;
    }
  }
  TensorList results;
  for (size_t i = 0; i < partials.size(); ++i) {
    results.push_back(make_global({partials[i].shape(), partials[i].dtype(), partials[i].device()}, placement, broadcast, out[i]));
  }
  return results;
}

TensorList all_gather_row_splits(const TensorList& row_splits) {
  if (row_splits.empty()) return {};
  const Placement& placement = bucket_placement(row_splits, NdSbp{sbp::split(0)}, "all_gather");
  autograd::NoGradGuard no_grad;
  TensorList out(row_splits.size());
  if (placement.contains(get_rank())) {
    const RowBucket bucket(row_splits, placement);
    TensorList mine;
    for (const Tensor& t : row_splits) mine.push_back(local_piece(t).reshape({-1}));
    const Tensor gathered = all_gather(cat(mine, 0), bucket.piece_elements, placement.ranks());
    for (size_t i = 0; i < row_splits.size(); ++i) {
      TensorList parts;
      int64_t member_start = 0;
      for (size_t m = 0; m < bucket.piece_elements.size(); ++m) {
        parts.push_back(gathered.narrow(0, member_start + bucket.offsets[m][i], bucket.elements[m][i]));
        member_start += bucket.piece_elements[m];
      }
      out[i] = cat(parts, 0).reshape(row_splits[i].shape());
    }
  }
  TensorList results;
  for (size_t i = 0; i < row_splits.size(); ++i) {
    const Tensor& t = row_splits[i];
    results.push_back(make_global({t.shape(), t.dtype(), t.device()}, placement, NdSbp{Sbp::broadcast()}, out[i]));
  }
  return results;
}

TensorList reduce_scatter_partial_sums(const TensorList& partials) {
  if (partials.empty()) return {};
  const Placement& placement = bucket_placement(partials, NdSbp{Sbp::partial_sum()}, "reduce_scatter");
  const NdSbp rows{sbp::split(0)};
  autograd::NoGradGuard no_grad;
  TensorList out(partials.size());
  if (placement.contains(get_rank())) {
    const RowBucket bucket(partials, placement);
    // Member m's segment of the input holds the rows of every tensor that m keeps.
    TensorList segments;
    for (int64_t m = 0; m < placement.size(); ++m) {
      for (const Tensor& t : partials) {
        const Tensor& whole = local_piece(t);
        const int64_t count = whole.size(0);
        segments.push_back(whole.narrow(0, split_part_start(count, placement.size(), m), split_part_size(count, placement.size(), m)).reshape({-1}));
      }
    }
    const Tensor mine = reduce_scatter(cat(segments, 0), bucket.piece_elements, ReduceOp::kSum, placement.ranks());
    const int64_t me = placement.index_of(get_rank());
    const auto& my_offsets = bucket.offsets[static_cast<size_t>(me)];
    const auto& my_elements = bucket.elements[static_cast<size_t>(me)];
    for (size_t i = 0; i < partials.size(); ++i) {
      out[i] = mine.narrow(0, my_offsets[i], my_elements[i]).reshape(local_shape(partials[i].shape(), placement, rows, me));
    }
  }
  TensorList results;
  for (size_t i = 0; i < partials.size(); ++i) {
    const Tensor& t = partials[i];
    results.push_back(make_global({t.shape(), t.dtype(), t.device()}, placement, rows, out[i]));
  }
  return results;
}

Tensor make_global(const TensorMeta& meta, const Placement& placement, const NdSbp& nd_sbp, const Tensor& local) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = meta.shape;
  impl->strides = contiguous_strides(meta.shape);
  impl->dtype = meta.dtype;
  impl->device = meta.device;
  impl->global = std::make_shared<GlobalInfo>(GlobalInfo{placement, nd_sbp, local});
  return Tensor(std::move(impl));
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

TensorList apply_global(const OpDef& op, const TensorList& given, const Attrs& attrs) {
  if (op.global_conversion) return run_conversion(op, given, attrs);
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
    if (std::any_of(locals.begin(), locals.end(), [](const Tensor& t) { return t.is_lazy(); })) {
      // Tracing a Graph: the interpreter (the tracer) records the op on the pieces; autograd
      // records the global op below, not this one.
      autograd::NoGradGuard no_grad;
      local_outputs = current_interpreter().apply(op, locals, local_attrs);
    } else {
      local_outputs = execute_op(op, locals, local_attrs, check_and_infer(op, locals, local_attrs));
    }
  }
  if (!op.inplace) {
    for (size_t o = 0; o < out_metas.size(); ++o) {
      outputs.push_back(make_global(out_metas[o], *placement, out_sbps[o], local_outputs.empty() ? Tensor() : local_outputs[o]));
    }
  }
  record(op, boxed, outputs, attrs);
  return outputs;
}

}  // namespace flow::distributed

namespace flow {

const Placement& Tensor::placement() const {
  if (!is_global()) fail("placement", "a local tensor has no placement; make it global with to_global()");
  return impl()->global->placement;
}

const NdSbp& Tensor::sbp() const {
  if (!is_global()) fail("sbp", "a local tensor has no sbp; make it global with to_global()");
  return impl()->global->nd_sbp;
}

Tensor Tensor::to_global(const Placement& placement, const NdSbp& nd_sbp) const {
  check_nd_sbp(placement, nd_sbp, shape(), "to_global");
  const int64_t world = distributed::get_world_size();
  for (int64_t rank : placement.ranks()) {
    if (rank >= world) fail("to_global", placement.str(), " names rank ", rank, " but the process group has ", world, " ranks");
  }
  if (is_global()) {
    if (placement == this->placement() && nd_sbp == sbp()) return *this;
    return apply_one(distributed::kToGlobal, {*this},
                     Attrs()
                         .set("placement", placement.attr())
                         .set("sbp", nd_sbp_attr(nd_sbp))
                         .set("src_placement", this->placement().attr())
                         .set("src_sbp", nd_sbp_attr(sbp())));
  }
  const int64_t rank = distributed::get_rank();
  if (!placement.contains(rank)) fail("to_global", "rank ", rank, " is not in ", placement.str(), " and has no piece to give");
  if (!(device() == placement.device_for(rank))) {
    fail("to_global", "the local tensor is on ", device(), " but rank ", rank, " of ", placement.str(), " uses ",
         placement.device_for(rank));
  }
  if (is_lazy() && std::any_of(nd_sbp.begin(), nd_sbp.end(), [](const Sbp& s) { return s.is_split(); })) {
    // The logical shape of split pieces is found by exchanging their sizes, which needs data.
    fail("to_global", "inside nn::Graph::build() a local tensor becomes global only with broadcast or partial_sum sbp, got ",
         nd_sbp_str(nd_sbp), "; pass the graph a global input instead");
  }
  const Shape logical = distributed::logical_shape_of(*this, placement, nd_sbp);
  return apply_one(distributed::kLocalToGlobal, {*this},
                   Attrs().set("placement", placement.attr()).set("sbp", nd_sbp_attr(nd_sbp)).set("shape", logical));
}

Tensor Tensor::to_local() const {
  if (!is_global()) return *this;
  return apply_one(distributed::kGlobalToLocal, {*this}, Attrs().set("placement", placement().attr()).set("sbp", nd_sbp_attr(sbp())));
}

}  // namespace flow
