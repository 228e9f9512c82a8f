// Sorting and selection along one dim: sort and topk are primitives returning values and int64
// indices; argsort is sort's indices. Their values' gradient goes back to the positions the
// indices name, so the vjp reads the indices alone.
#include "core/ops/sorting.h"

#include <algorithm>

#include "core/interpreter.h"
#include "core/ops/checks.h"
#include "core/ops/creation.h"
#include "core/ops/flops.h"
#include "core/ops/index.h"

namespace flow {
namespace {

// Lines along dim are sorted (or selected from) on their own, so splitting any other dim holds.
std::vector<SbpSignature> along_dim_sbp(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  std::vector<SbpSignature> signatures;
  for (int64_t d = 0; d < in[0].shape.ndim(); ++d) {
    if (d != attrs.get<int64_t>("dim")) signatures.push_back({{Sbp::split(d)}, {Sbp::split(d), Sbp::split(d)}});
  }
  signatures.push_back({{Sbp::broadcast()}, {Sbp::broadcast(), Sbp::broadcast()}});
  return signatures;
}

// values[..., j, ...] = input[..., indices[..., j, ...], ...]: a gather, whose gradient is the
// scatter-add of the values' gradient into zeros (the indices of a line are distinct).
TensorList values_vjp(const VjpContext& ctx) {
  const TensorMeta& meta = ctx.input_meta(0);
  if (meta.shape.ndim() == 0) return TensorList{ctx.grad(0)};
  return TensorList{scatter_add(zeros(meta.shape, options_beside(ctx.grad(0)).dtype(meta.dtype)), ctx.attrs.get<int64_t>("dim"),
                                ctx.output(1), ctx.grad(0))};
}

ProfileCost reads_indices(const std::vector<TensorMeta>&, const std::vector<TensorMeta>& out, const Attrs&) {
  return ProfileCost{{}, {1}, out[0].shape.numel(), 0};
}

const OpDef& kSort = OpBuilder("sort")
                         .inputs({"input"})
                         .outputs({"values", "indices"})
                         .attrs({{"dim", AttrType::kInt}, {"descending", AttrType::kBool}})
                         .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
                           checks::check_axis("sort", attrs.get<int64_t>("dim"), std::max<int64_t>(in[0].shape.ndim(), 1));  // 0-d acts as 1-d
                           return std::vector<TensorMeta>{in[0], {in[0].shape, kInt64, in[0].device}};
                         })
                         .sbp(along_dim_sbp)
                         .flops(flops::per_input_element)
                         .profile_cost(reads_indices)
                         .vjp(values_vjp)
                         .def();

const OpDef& kTopk = OpBuilder("topk")
                         .inputs({"input"})
                         .outputs({"values", "indices"})
                         .attrs({{"k", AttrType::kInt}, {"dim", AttrType::kInt}, {"largest", AttrType::kBool}, {"sorted", AttrType::kBool}})
                         .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
                           const Shape& shape = in[0].shape;
                           const int64_t dim = attrs.get<int64_t>("dim"), k = attrs.get<int64_t>("k");
                           checks::check_axis("topk", dim, std::max<int64_t>(shape.ndim(), 1));  // 0-d acts as 1-d
                           const int64_t size = shape.ndim() == 0 ? 1 : shape[dim];
                           if (k < 0 || k > size) fail("topk", "selected index k out of range: k ", k, " for dimension ", dim, " of size ", size);
                           Shape out = shape;
                           if (shape.ndim() > 0) out[dim] = k;
                           return std::vector<TensorMeta>{{out, in[0].dtype, in[0].device}, {out, kInt64, in[0].device}};
                         })
                         .sbp(along_dim_sbp)
                         .flops(flops::per_input_element)
                         .profile_cost(reads_indices)
                         .vjp(values_vjp)
                         .def();

}  // namespace

ValuesIndices sort(const Tensor& input, int64_t dim, bool descending, bool /*stable: every sort is*/) {
  TensorList out = apply(kSort, {input}, Attrs().set("dim", wrap_dim(dim, input.dim(), "sort")).set("descending", descending));
  return {out[0], out[1]};
}

Tensor argsort(const Tensor& input, int64_t dim, bool descending, bool stable) {
  return sort(input, dim, descending, stable).indices;
}

ValuesIndices topk(const Tensor& input, int64_t k, int64_t dim, bool largest, bool sorted) {
  TensorList out = apply(kTopk, {input},
                         Attrs()
                             .set("k", k)
                             .set("dim", wrap_dim(dim, input.dim(), "topk"))
                             .set("largest", largest)
                             .set("sorted", sorted));
  return {out[0], out[1]};
}

}  // namespace flow
