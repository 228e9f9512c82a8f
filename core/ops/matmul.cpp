// Matrix products. Primitives: "matmul" over rank >= 2 operands with broadcast batch dims, and
// "linear" (x @ w^T + bias, the fused form layers and the Graph compiler use).
#include "core/ops/matmul.h"

#include "core/interpreter.h"
#include "core/ops/binary.h"
#include "core/ops/reduce.h"
#include "core/ops/view.h"

namespace flow {
namespace {

Shape batch_of(const Shape& shape) { return Shape(shape.begin(), shape.end() - 2); }

void check_floating_pair(const TensorMeta& a, const TensorMeta& b, const char* op) {
  if (!is_floating(a.dtype) || !is_floating(b.dtype)) {
    fail(op, "expected floating point inputs, got ", dtype_name(a.dtype), " and ", dtype_name(b.dtype));
  }
  if (a.dtype != b.dtype) {
    fail(op, "expected both inputs to have the same dtype, got ", dtype_name(a.dtype), " and ", dtype_name(b.dtype));
  }
}

std::vector<TensorMeta> matmul_infer(const std::vector<TensorMeta>& in, const Attrs&) {
  const Shape &a = in[0].shape, &b = in[1].shape;
  check_floating_pair(in[0], in[1], "matmul");
  if (a.ndim() < 2 || b.ndim() < 2) fail("matmul", "the primitive needs operands of rank >= 2, got ", a, " and ", b);
  if (a[a.ndim() - 1] != b[b.ndim() - 2]) fail("matmul", "size mismatch: ", a, " @ ", b);
  Shape out = broadcast_shapes(batch_of(a), batch_of(b), "matmul");
  out.push_back(a[a.ndim() - 2]);
  out.push_back(b[b.ndim() - 1]);
  return {{out, in[0].dtype, in[0].device}};
}

std::vector<SbpSignature> matmul_sbp(const std::vector<TensorMeta>& in, const Attrs&) {
  const int64_t ra = in[0].shape.ndim(), rb = in[1].shape.ndim();
  const int64_t ro = std::max(ra, rb);
  std::vector<SbpSignature> signatures{
      {{Sbp::split(ra - 2), Sbp::broadcast()}, {Sbp::split(ro - 2)}},
      {{Sbp::broadcast(), Sbp::split(rb - 1)}, {Sbp::split(ro - 1)}},
      {{Sbp::split(ra - 1), Sbp::split(rb - 2)}, {Sbp::partial_sum()}},
      {{Sbp::broadcast(), Sbp::broadcast()}, {Sbp::broadcast()}},
  };
  if (ra == rb && ra > 2) signatures.push_back({{Sbp::split(0), Sbp::split(0)}, {Sbp::split(0)}});
  return signatures;
}

// 2 per multiply-accumulate: every output element sums `inner` products.
int64_t product_flops(const std::vector<TensorMeta>& out, int64_t inner) { return 2 * out[0].shape.numel() * inner; }

// The backward of a product computes two products of the forward's size (grad w.r.t. each
// operand) and reads both operands: for linear the weight is a parameter, which the profiler does
// not charge again.
ProfileCost product_profile_cost(int64_t forward_flops) { return {{0, 1}, {}, 2 * forward_flops, 0}; }

const OpDef& kMatmul =
    OpBuilder("matmul")
        .inputs({"a", "b"})
        .outputs({"out"})
        .strided_inputs()
        .infer(matmul_infer)
        .sbp(matmul_sbp)
        .flops([](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out, const Attrs&) {
          return product_flops(out, in[0].shape[in[0].shape.ndim() - 1]);
        })
        .profile_cost([](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out, const Attrs&) {
          return product_profile_cost(product_flops(out, in[0].shape[in[0].shape.ndim() - 1]));
        })
        .vjp([](const VjpContext& ctx) {
          TensorList grads(2);
          if (ctx.needs_input_grad[0]) {
            grads[0] = sum_to(matmul(ctx.grad(), ctx.input(1).transpose(-1, -2)), ctx.input_meta(0).shape);
          }
          if (ctx.needs_input_grad[1]) {
            grads[1] = sum_to(matmul(ctx.input(0).transpose(-1, -2), ctx.grad()), ctx.input_meta(1).shape);
          }
          return grads;
        })
        .def();

std::vector<TensorMeta> linear_infer(const std::vector<TensorMeta>& in, const Attrs&) {
  if (in.size() != 2 && in.size() != 3) fail("linear", "expected input, weight and optional bias, got ", in.size(), " tensors");
  const Shape &x = in[0].shape, &w = in[1].shape;
  check_floating_pair(in[0], in[1], "linear");
  if (x.ndim() < 1) fail("linear", "input must have at least one dimension, got shape ", x);
  if (w.ndim() != 2) fail("linear", "weight must be 2-d (out_features, in_features), got shape ", w);
  if (x[x.ndim() - 1] != w[1]) fail("linear", "size mismatch: input ", x, " has ", x[x.ndim() - 1], " features but weight ", w, " expects ", w[1]);
  if (in.size() == 3) {
    check_floating_pair(in[0], in[2], "linear");
    if (!(in[2].shape == Shape{w[0]})) fail("linear", "bias must have shape (", w[0], ",), got ", in[2].shape);
  }
  Shape out = x;
  out[out.ndim() - 1] = w[0];
  return {{out, in[0].dtype, in[0].device}};
}

const OpDef& kLinear =
    OpBuilder("linear")
        .inputs({"input", "weight", "bias"}, /*variadic=*/true)
        .outputs({"out"})
        .infer(linear_infer)
        // The bias adds are not counted, as in PyTorch's profiler.
        .flops([](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out, const Attrs&) {
          return product_flops(out, in[1].shape[1]);
        })
        .profile_cost([](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out, const Attrs&) {
          return product_profile_cost(product_flops(out, in[1].shape[1]));
        })
        .sbp([](const std::vector<TensorMeta>& in, const Attrs&) {
          const int64_t r = in[0].shape.ndim();
          std::vector<SbpSignature> signatures;
          // Data parallel: rows split, weight broadcast. Column parallel: weight rows (out
          // features) split. Row parallel: in features split on both sides, the partial
          // products (and the bias, once) summing to the output.
          std::vector<Sbp> data{Sbp::split(0), Sbp::broadcast()}, column{Sbp::broadcast(), Sbp::split(0)},
              row{Sbp::split(r - 1), Sbp::split(1)};
          if (in.size() == 3) {
            data.push_back(Sbp::broadcast());
            column.push_back(Sbp::split(0));
            row.push_back(Sbp::partial_sum());
          }
          if (r > 1) signatures.push_back({data, {Sbp::split(0)}});
          signatures.push_back({column, {Sbp::split(r - 1)}});
          signatures.push_back({row, {Sbp::partial_sum()}});
          signatures.push_back({std::vector<Sbp>(in.size(), Sbp::broadcast()), {Sbp::broadcast()}});
          return signatures;
        })
        .vjp([](const VjpContext& ctx) {
          const Shape& x_shape = ctx.input_meta(0).shape;
          const int64_t in_features = x_shape[x_shape.ndim() - 1];
          const Tensor grad_2d = reshape(ctx.grad(), {-1, ctx.grad().size(-1)});
          TensorList grads(ctx.num_inputs());
          if (ctx.needs_input_grad[0]) grads[0] = reshape(matmul(grad_2d, ctx.input(1)), x_shape);
          if (ctx.needs_input_grad[1]) grads[1] = matmul(grad_2d.t(), reshape(ctx.input(0), {-1, in_features}));
          if (ctx.num_inputs() == 3 && ctx.needs_input_grad[2]) grads[2] = sum(grad_2d, {0});
          return grads;
        })
        .def();

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (a.dim() == 0 || b.dim() == 0) {
    fail("matmul", "both arguments need at least 1 dimension, got shapes ", a.shape(), " and ", b.shape());
  }
  const Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  const Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  if (a2.size(-1) != b2.size(-2)) fail("matmul", "size mismatch: ", a.shape(), " @ ", b.shape());
  Tensor out = apply_one(kMatmul, {a2, b2});
  if (b.dim() == 1) out = out.squeeze(-1);
  if (a.dim() == 1) out = out.squeeze(b.dim() == 1 ? -1 : -2);
  return out;
}

Tensor mm(const Tensor& a, const Tensor& b) {
  if (a.dim() != 2 || b.dim() != 2) fail("mm", "expected 2-d tensors, got shapes ", a.shape(), " and ", b.shape());
  return matmul(a, b);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  if (a.dim() != 3 || b.dim() != 3) fail("bmm", "expected 3-d tensors, got shapes ", a.shape(), " and ", b.shape());
  if (a.size(0) != b.size(0)) fail("bmm", "batch sizes differ: ", a.shape(), " and ", b.shape());
  return matmul(a, b);
}

Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  return apply_one(kLinear, bias.defined() ? TensorList{input, weight, bias} : TensorList{input, weight});
}

Tensor Tensor::matmul(const Tensor& other) const { return flow::matmul(*this, other); }

}  // namespace flow
