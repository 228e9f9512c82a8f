// softmax and log_softmax along a dim: primitives with fused, numerically stable kernels. An
// optional "dtype" attribute (PyTorch's dtype argument) makes a float16/bfloat16 input give a
// float32 output: the CPU kernels widen element by element, so the result is the float32 op on the
// widened input without a float32 copy of it (autocast's choice for these ops on the CPU). The
// gradient ops' "dtype" is then the input gradient's.
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

// Checks a "dtype" attribute: the same as `given`'s, or float32 where narrow is float16/bfloat16
// (narrow is the forward's input dtype: `given` itself in the forward, the attribute in the gradient).
void check_widening(const char* name, const TensorMeta& given, DType attr, DType narrow) {
  if (attr == given.dtype) return;
  const DType wide = narrow == given.dtype ? attr : given.dtype;
  if (!is_reduced_floating(narrow) || wide != kFloat32) {
    fail(name, "dtype ", dtype_name(attr), " with ", dtype_name(given.dtype),
         " tensors: a float16/bfloat16 input and a float32 output are the only mix");
  }
  if (given.device.is_cuda()) fail(name, "mixing ", dtype_name(narrow), " and float32 is CPU-only");
}

DType attr_dtype(const Attrs& attrs, DType otherwise) { return attrs.has("dtype") ? attrs.get<DType>("dtype") : otherwise; }

const OpDef& softmax_op(const char* name, VjpFn vjp) {
  return OpBuilder(name)
      .inputs({"input"})
      .outputs({"out"})
      .attrs({{"dim", AttrType::kInt}})
      .infer([name](const std::vector<TensorMeta>& in, const Attrs& attrs) {
        checks::check_floating(name, in[0], "input");
        checks::check_axis(name, attrs.get<int64_t>("dim"), std::max<int64_t>(in[0].shape.ndim(), 1));  // 0-d acts as 1-d
        TensorMeta out = in[0];
        out.dtype = attr_dtype(attrs, in[0].dtype);
        check_widening(name, in[0], out.dtype, in[0].dtype);
        return std::vector<TensorMeta>{out};
      })
      .sbp(softmax_sbp)
      // Counted per input element (Colossal-AI's convention); the vjp reads the output.
      .flops(flops::per_input_element)
      .profile_cost(profile::elementwise_saving_output)
      .vjp(std::move(vjp))
      .def();
}

std::vector<SbpSignature> softmax_grad_sbp(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  std::vector<SbpSignature> signatures;
  for (int64_t d = 0; d < in[1].shape.ndim(); ++d) {
    if (d != attrs.get<int64_t>("dim")) signatures.push_back({{Sbp::split(d), Sbp::split(d)}, {Sbp::split(d)}});
  }
  signatures.push_back({{Sbp::broadcast(), Sbp::broadcast()}, {Sbp::broadcast()}});
  return signatures;
}

// The gradients of softmax and log_softmax as ops of their own (PyTorch's
// _softmax_backward_data): one pass per row and one tensor out, where the formula as separate ops
// makes three tensors of the input's size (a cross-entropy over GPT-2's 50257 words: 206 MB each
// at 1024 tokens). Inputs: the output's gradient and the forward's output.
const OpDef& softmax_grad_op(const char* name, VjpFn vjp) {
  return OpBuilder(name)
      .inputs({"grad", "out"})
      .outputs({"grad_input"})
      .attrs({{"dim", AttrType::kInt}})
      .infer([name](const std::vector<TensorMeta>& in, const Attrs& attrs) {
        checks::check_floating(name, in[1], "out");
        if (in[0].dtype != in[1].dtype) fail(name, "grad has dtype ", dtype_name(in[0].dtype), " but out has ", dtype_name(in[1].dtype));
        if (!(in[0].shape == in[1].shape)) fail(name, "grad ", in[0].shape, " and out ", in[1].shape, " must have the same shape");
        checks::check_axis(name, attrs.get<int64_t>("dim"), std::max<int64_t>(in[1].shape.ndim(), 1));
        TensorMeta grad_input = in[1];
        grad_input.dtype = attr_dtype(attrs, in[1].dtype);
        check_widening(name, in[1], grad_input.dtype, grad_input.dtype);
        return std::vector<TensorMeta>{grad_input};
      })
      .sbp(softmax_grad_sbp)
      .flops(flops::per_input_element)
      .vjp(std::move(vjp))
      .def();
}

Attrs dim_attr(const VjpContext& ctx) { return Attrs().set("dim", ctx.attrs.get<int64_t>("dim")); }

// The forward's gradient op: its input gradient in the forward input's dtype.
Attrs grad_attrs(const VjpContext& ctx) {
  Attrs attrs = dim_attr(ctx);
  if (ctx.input_meta(0).dtype != ctx.output(0).dtype()) attrs.set("dtype", ctx.input_meta(0).dtype);
  return attrs;
}

// grad_input = y (g - sum(g y)). It is linear in g with softmax_grad's own form, so g's gradient
// is softmax_grad of the incoming gradient u; y's is u (g - sum(g y)) - g sum(u y).
const OpDef& kSoftmaxGrad = softmax_grad_op("softmax_grad", [](const VjpContext& ctx) {
  const Tensor &g = ctx.input(0), &y = ctx.input(1), &u = ctx.grad();
  const int64_t dim = ctx.attrs.get<int64_t>("dim");
  TensorList grads(2);
  if (ctx.needs_input_grad[0]) grads[0] = apply_one(kSoftmaxGrad, {u.to(y.dtype()), y}, dim_attr(ctx));
  if (ctx.needs_input_grad[1]) grads[1] = u * (g - sum(g * y, {dim}, true)) - g * sum(u * y, {dim}, true);
  return grads;
});
// grad_input = g - exp(y) sum(g): g's gradient is u - sum(u exp(y)), y's -u exp(y) sum(g).
const OpDef& kLogSoftmaxGrad = softmax_grad_op("log_softmax_grad", [](const VjpContext& ctx) {
  const Tensor &g = ctx.input(0), &y = ctx.input(1), &u = ctx.grad();
  const int64_t dim = ctx.attrs.get<int64_t>("dim");
  TensorList grads(2);
  if (ctx.needs_input_grad[0]) grads[0] = u - sum(u * exp(y), {dim}, true);
  if (ctx.needs_input_grad[1]) grads[1] = neg(u * exp(y) * sum(g, {dim}, true));
  return grads;
});

// CUDA has no kernels for the gradient ops yet: there the formulas run as separate ops.
bool has_gradient_kernel(const Tensor& output) { return !output.device().is_cuda(); }

const OpDef& kSoftmax = softmax_op("softmax", [](const VjpContext& ctx) {
  const Tensor y = ctx.output(0);
  if (has_gradient_kernel(y)) return TensorList{apply_one(kSoftmaxGrad, {ctx.grad(), y}, grad_attrs(ctx))};
  const int64_t dim = ctx.attrs.get<int64_t>("dim");
  return TensorList{y * (ctx.grad() - sum(ctx.grad() * y, {dim}, true))};
});
const OpDef& kLogSoftmax = softmax_op("log_softmax", [](const VjpContext& ctx) {
  const Tensor y = ctx.output(0);
  if (has_gradient_kernel(y)) return TensorList{apply_one(kLogSoftmaxGrad, {ctx.grad(), y}, grad_attrs(ctx))};
  const int64_t dim = ctx.attrs.get<int64_t>("dim");
  return TensorList{ctx.grad() - exp(y) * sum(ctx.grad(), {dim}, true)};
});

Tensor run(const OpDef& op, const Tensor& input, int64_t dim, const char* name) {
  return apply_one(op, {input}, Attrs().set("dim", wrap_dim(dim, input.dim(), name)));
}

// The op on input cast to dtype: a 16-bit float widened by the kernel itself on the CPU.
Tensor run(const OpDef& op, const Tensor& input, int64_t dim, DType dtype, const char* name) {
  if (input.dtype() == dtype) return run(op, input, dim, name);
  if (!is_reduced_floating(input.dtype()) || dtype != kFloat32 || input.device().is_cuda()) return run(op, input.to(dtype), dim, name);
  return apply_one(op, {input}, Attrs().set("dim", wrap_dim(dim, input.dim(), name)).set("dtype", dtype));
}

}  // namespace

Tensor softmax(const Tensor& input, int64_t dim) { return run(kSoftmax, input, dim, "softmax"); }
Tensor log_softmax(const Tensor& input, int64_t dim) { return run(kLogSoftmax, input, dim, "log_softmax"); }
Tensor softmax(const Tensor& input, int64_t dim, DType dtype) { return run(kSoftmax, input, dim, dtype, "softmax"); }
Tensor log_softmax(const Tensor& input, int64_t dim, DType dtype) { return run(kLogSoftmax, input, dim, dtype, "log_softmax"); }
Tensor Tensor::softmax(int64_t dim) const { return flow::softmax(*this, dim); }

}  // namespace flow
