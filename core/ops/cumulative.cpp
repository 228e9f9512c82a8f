// cumsum: a primitive scan along one dim. Its "reverse" attribute sums from the end instead;
// the functional call never sets it, but it makes the vjp (the gradient summed from the end)
// one cumsum of the gradient, and the vjp of that the forward direction again, to any order.
#include "core/ops/cumulative.h"

#include "core/interpreter.h"
#include "core/ops/checks.h"
#include "core/ops/copy.h"
#include "core/ops/flops.h"

namespace flow {
namespace {

// Slices across the other dims scan on their own; the sum is linear, so partial sums stay partial.
std::vector<SbpSignature> cumsum_sbp(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  std::vector<SbpSignature> signatures;
  for (int64_t d = 0; d < in[0].shape.ndim(); ++d) {
    if (d != attrs.get<int64_t>("dim")) signatures.push_back({{Sbp::split(d)}, {Sbp::split(d)}});
  }
  signatures.push_back({{Sbp::broadcast()}, {Sbp::broadcast()}});
  signatures.push_back({{Sbp::partial_sum()}, {Sbp::partial_sum()}});
  return signatures;
}

const OpDef& kCumsum = OpBuilder("cumsum")
                           .inputs({"input"})
                           .outputs({"out"})
                           .attrs({{"dim", AttrType::kInt}, {"reverse", AttrType::kBool}})
                           .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
                             checks::check_axis("cumsum", attrs.get<int64_t>("dim"), std::max<int64_t>(in[0].shape.ndim(), 1));  // 0-d acts as 1-d
                             return std::vector<TensorMeta>{in[0]};
                           })
                           .sbp(cumsum_sbp)
                           .flops(flops::per_input_element)
                           .profile_cost([](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>&, const Attrs&) {
                             return ProfileCost{{}, {}, in[0].shape.numel(), 0};
                           })
                           .vjp([](const VjpContext& ctx) {
                             const Attrs reversed = Attrs(ctx.attrs).set("reverse", !ctx.attrs.get<bool>("reverse"));
                             return TensorList{apply_one(find_op("cumsum"), {ctx.grad()}, reversed)};
                           })
                           .def();

}  // namespace

Tensor cumsum(const Tensor& input, int64_t dim, std::optional<DType> dtype) {
  const DType target = dtype.value_or(is_integral(input.dtype(), /*include_bool=*/true) ? kInt64 : input.dtype());
  return apply_one(kCumsum, {target == input.dtype() ? input : to(input, target)},
                   Attrs().set("dim", wrap_dim(dim, input.dim(), "cumsum")).set("reverse", false));
}

}  // namespace flow
