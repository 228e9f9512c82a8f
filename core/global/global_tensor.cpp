// The global tensor itself: the three conversion ops (to_global, local_to_global,
// global_to_local), Tensor's global methods, and building global tensors from pieces or wholes.
#include "core/global/global_tensor.h"

#include <glog/logging.h>

#include <algorithm>

#include "core/global/boxing.h"
#include "core/grad_mode.h"
#include "core/interpreter.h"
#include "core/ops/comm.h"
#include "core/ops/creation.h"
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

TensorList convert_global(const OpDef& op, const TensorList& inputs, const Attrs& attrs) {
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
  record_for_autograd(op, inputs, outputs, attrs);
  return outputs;
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

Tensor from_whole(const Tensor& whole, const Placement& placement, const NdSbp& nd_sbp) {
  if (!placement.contains(get_rank())) return make_global({whole.shape(), whole.dtype(), whole.device()}, placement, nd_sbp, Tensor());
  return whole.to_global(placement, NdSbp(nd_sbp.size(), Sbp::broadcast())).to_global(placement, nd_sbp);
}

Tensor laid_out_like(const Tensor& value, const Tensor& target) {
  return target.is_global() && !value.is_global() ? from_whole(value, target.placement(), target.sbp()) : value;
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
