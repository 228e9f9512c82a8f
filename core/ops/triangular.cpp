// tril and triu: primitives that keep one triangle of each matrix in the last two dims. Both are
// linear masks, so each vjp is the same op on the gradient.
#include "core/ops/triangular.h"

#include "core/interpreter.h"

namespace flow {
namespace {

// The mask is the same for every matrix: any batch dim splits, and partial sums stay partial.
std::vector<SbpSignature> triangular_sbp(const std::vector<TensorMeta>& in, const Attrs&) {
  std::vector<SbpSignature> signatures;
  for (int64_t d = 0; d + 2 < in[0].shape.ndim(); ++d) signatures.push_back({{Sbp::split(d)}, {Sbp::split(d)}});
  signatures.push_back({{Sbp::broadcast()}, {Sbp::broadcast()}});
  signatures.push_back({{Sbp::partial_sum()}, {Sbp::partial_sum()}});
  return signatures;
}

const OpDef& triangular_op(const char* name) {
  return OpBuilder(name)
      .inputs({"input"})
      .outputs({"out"})
      .attrs({{"diagonal", AttrType::kInt}})
      .infer([name](const std::vector<TensorMeta>& in, const Attrs&) {
        if (in[0].shape.ndim() < 2) fail(name, "input tensor must have at least 2 dimensions, got ", in[0].shape);
        return std::vector<TensorMeta>{in[0]};
      })
      .sbp(triangular_sbp)
      .flops(flops::elementwise)
      .profile_cost(profile::elementwise_saving_nothing)
      .vjp([name](const VjpContext& ctx) {
        return TensorList{apply_one(find_op(name), {ctx.grad()}, ctx.attrs)};
      })
      .def();
}

const OpDef& kTril = triangular_op("tril");
const OpDef& kTriu = triangular_op("triu");

}  // namespace

Tensor tril(const Tensor& input, int64_t diagonal) { return apply_one(kTril, {input}, Attrs().set("diagonal", diagonal)); }
Tensor triu(const Tensor& input, int64_t diagonal) { return apply_one(kTriu, {input}, Attrs().set("diagonal", diagonal)); }
Tensor Tensor::tril(int64_t diagonal) const { return flow::tril(*this, diagonal); }
Tensor Tensor::triu(int64_t diagonal) const { return flow::triu(*this, diagonal); }

}  // namespace flow
