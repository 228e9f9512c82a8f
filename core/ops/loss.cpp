#include "core/ops/loss.h"

#include "core/interpreter.h"
#include "core/ops/binary.h"
#include "core/ops/checks.h"
#include "core/ops/elementwise_util.h"
#include "core/ops/unary.h"

namespace flow {
namespace {

const OpDef& kBinaryCrossEntropy =
    OpBuilder("binary_cross_entropy")
        .inputs({"input", "target"})
        .outputs({"out"})
        .infer([](const std::vector<TensorMeta>& in, const Attrs&) {
          if (!(in[0].shape == in[1].shape)) {
            fail("binary_cross_entropy", "target ", in[1].shape, " and input ", in[0].shape, " must have the same shape");
          }
          elementwise::check_same_dtype(in, "binary_cross_entropy");
          checks::check_floating("binary_cross_entropy", in[0], "input");
          return std::vector<TensorMeta>{in[0]};
        })
        .sbp(sbp::elementwise)
        .vjp([](const VjpContext& ctx) {
          const Tensor p = ctx.input(0), t = ctx.input(1);
          TensorList grads(2);
          if (ctx.needs_input_grad[0]) grads[0] = ctx.grad() * (p - t) / clamp(p * (1.0 - p), 1e-12, std::nullopt);
          if (ctx.needs_input_grad[1]) grads[1] = ctx.grad() * (log(1.0 - p) - log(p));
          return grads;
        })
        .def();

}  // namespace

Tensor binary_cross_entropy_elementwise(const Tensor& input, const Tensor& target) {
  return apply_one(kBinaryCrossEntropy, {input, target}, {});
}

}  // namespace flow
