// softmax and log_softmax along a dim: primitives with fused, numerically stable kernels.
#include "core/ops/softmax.h"

#include "core/interpreter.h"
#include "core/ops/binary.h"
#include "core/ops/checks.h"
#include "core/ops/flops.h"
#include "core/ops/reduce.h"
#include "core/ops/unary.h"

namespace flow {
namespace {

std::vector<SbpSignature> softmax_sbp(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  std::vector<SbpSignature> signatures;
  for (int64_t d = 0; d < in[0].shape.ndim(); ++d) {
    if (d != attrs.get<int64_t>("dim")) signatures.push_back({{Sbp::split(d)}, {Sbp::split(d)}});
  }
  signatures.push_back({{Sbp::broadcast()}, {Sbp::broadcast()}});
  return signatures;
}

const OpDef& softmax_op(const char* name, VjpFn vjp) {
  return OpBuilder(name)
      .inputs({"input"})
      .outputs({"out"})
      .attrs({{"dim", AttrType::kInt}})
      .infer([name](const std::vector<TensorMeta>& in, const Attrs& attrs) {
        checks::check_floating(name, in[0], "input");
        checks::check_axis(name, attrs.get<int64_t>("dim"), std::max<int64_t>(in[0].shape.ndim(), 1));  // 0-d acts as 1-d
        return std::vector<TensorMeta>{in[0]};
      })
      .sbp(softmax_sbp)
      // Counted per input element (Colossal-AI's convention); the vjp reads the output.
      .flops(flops::per_input_element)
      .profile_cost(profile::elementwise_saving_output)
      .vjp(std::move(vjp))
      .def();
}

const OpDef& kSoftmax = softmax_op("softmax", [](const VjpContext& ctx) {
  const Tensor y = ctx.output(0);
  const int64_t dim = ctx.attrs.get<int64_t>("dim");
  return TensorList{y * (ctx.grad() - sum(ctx.grad() * y, {dim}, true))};
});
const OpDef& kLogSoftmax = softmax_op("log_softmax", [](const VjpContext& ctx) {
  const int64_t dim = ctx.attrs.get<int64_t>("dim");
  return TensorList{ctx.grad() - exp(ctx.output(0)) * sum(ctx.grad(), {dim}, true)};
});

Tensor run(const OpDef& op, const Tensor& input, int64_t dim, const char* name) {
  return apply_one(op, {input}, Attrs().set("dim", wrap_dim(dim, input.dim(), name)));
}

}  // namespace

Tensor softmax(const Tensor& input, int64_t dim) { return run(kSoftmax, input, dim, "softmax"); }
Tensor log_softmax(const Tensor& input, int64_t dim) { return run(kLogSoftmax, input, dim, "log_softmax"); }
Tensor Tensor::softmax(int64_t dim) const { return flow::softmax(*this, dim); }

}  // namespace flow
