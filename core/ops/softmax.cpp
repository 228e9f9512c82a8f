// softmax and log_softmax along a dim: primitives with fused, numerically stable kernels. An
// optional "dtype" attribute (PyTorch's dtype argument) makes a float16/bfloat16 input give a
// float32 output: the CPU kernels widen element by element, so the result is the float32 op on the
// widened input without a float32 copy of it (autocast's choice for these ops on the CPU). The
// gradient ops' "dtype" is then the input gradient's.
#include "core/ops/softmax.h"

#include "core/interpreter.h"
#include "core/ops/binary.h"
#include "core/ops/index.h"
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

// Sparse softmax cross-entropy. Outputs: the losses (N) and, for the gradient, each row's max and
// log of the sum of exp(x - max) in the compute type (float, double for float64): the gradient
// recomputes log_softmax as (x - max) - log_sum_exp, the forward's float operations, so that the
// fused op gives the bits log_softmax + gather gave.
constexpr const char* kCrossEntropy = "sparse_softmax_cross_entropy";
constexpr const char* kCrossEntropyGrad = "sparse_softmax_cross_entropy_grad";

DType statistics_dtype(DType logits) { return logits == kFloat64 ? kFloat64 : kFloat32; }

void check_logits_and_labels(const char* name, const TensorMeta& logits, const TensorMeta& labels) {
  checks::check_floating(name, logits, "logits");
  if (logits.shape.ndim() != 2) fail(name, "expects logits of shape (N, C), got ", logits.shape);
  if (labels.dtype != kInt64) fail(name, "expects int64 labels, got ", dtype_name(labels.dtype));
  const Shape rows{logits.shape[0]};
  if (!(labels.shape == rows)) fail(name, "expects labels of shape ", rows, ", got ", labels.shape);
}

// Rows split: every input and output on dim 0.
std::vector<SbpSignature> rows_sbp(size_t inputs, size_t outputs) {
  return {{std::vector<Sbp>(inputs, Sbp::split(0)), std::vector<Sbp>(outputs, Sbp::split(0))},
          {std::vector<Sbp>(inputs, Sbp::broadcast()), std::vector<Sbp>(outputs, Sbp::broadcast())}};
}

// The gradient: grad_logits = (softmax(x) - one_hot(label)) * grad[n], zero on ignored rows.
// Inputs: grad (N), logits, labels, max, log_sum_exp. Its own gradient treats the statistics as
// the functions of the logits they are: for g's incoming gradient u, logits get
// grad[n] p (u - sum(u p)) and grad gets sum(u (p - one_hot)) per row.
const OpDef& kSparseCrossEntropyGrad =
    OpBuilder(kCrossEntropyGrad)
        .inputs({"grad", "logits", "labels", "max", "log_sum_exp"})
        .outputs({"grad_logits"})
        .attrs({{"ignore_index", AttrType::kInt}})
        .infer([](const std::vector<TensorMeta>& in, const Attrs&) {
          check_logits_and_labels(kCrossEntropyGrad, in[1], in[2]);
          const Shape rows{in[1].shape[0]};
          if (!(in[0].shape == rows) || !is_floating(in[0].dtype)) fail(kCrossEntropyGrad, "grad must be floating of shape ", rows, ", got ", in[0].shape);
          for (size_t i : {3, 4}) {
            if (!(in[i].shape == rows) || in[i].dtype != statistics_dtype(in[1].dtype)) fail(kCrossEntropyGrad, "row statistics do not match the logits");
          }
          return std::vector<TensorMeta>{in[1]};
        })
        .sbp([](const std::vector<TensorMeta>&, const Attrs&) { return rows_sbp(5, 1); })
        .flops(flops::per_input_element)
        .profile_cost([](const std::vector<TensorMeta>&, const std::vector<TensorMeta>&, const Attrs&) {
          return ProfileCost{{0, 1, 2, 3, 4}, {}, 0, 0};
        })
        .vjp([](const VjpContext& ctx) {
          const Tensor &g = ctx.input(0), &x = ctx.input(1), &labels = ctx.input(2), &u = ctx.grad();
          const int64_t ignore_index = ctx.attrs.get<int64_t>("ignore_index");
          const Tensor valid = ne(labels, ignore_index);
          const Tensor p = exp((x.to(ctx.input(3).dtype()) - ctx.input(3).unsqueeze(1)) - ctx.input(4).unsqueeze(1));
          const Tensor uw = u.to(p.dtype());
          TensorList grads(5);
          if (ctx.needs_input_grad[0]) {
            const Tensor hot = one_hot(where(valid, labels, 0), x.size(1)).to(p.dtype());
            grads[0] = where(valid, sum(uw * (p - hot), {1}), 0).to(g.dtype());
          }
          if (ctx.needs_input_grad[1]) {
            const Tensor scale = where(valid, g.to(p.dtype()), 0).unsqueeze(1);
            grads[1] = (scale * p * (uw - sum(uw * p, {1}, true))).to(x.dtype());
          }
          return grads;
        })
        .def();

const OpDef& kSparseCrossEntropy =
    OpBuilder(kCrossEntropy)
        .inputs({"logits", "labels"})
        .outputs({"loss", "max", "log_sum_exp"})
        .attrs({{"ignore_index", AttrType::kInt}})
        .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          check_logits_and_labels(kCrossEntropy, in[0], in[1]);
          const Shape rows{in[0].shape[0]};
          const DType loss_dtype = attr_dtype(attrs, in[0].dtype);
          check_widening(kCrossEntropy, in[0], loss_dtype, in[0].dtype);
          const TensorMeta statistics{rows, statistics_dtype(in[0].dtype), in[0].device};
          return std::vector<TensorMeta>{{rows, loss_dtype, in[0].device}, statistics, statistics};
        })
        .sbp([](const std::vector<TensorMeta>&, const Attrs&) { return rows_sbp(2, 3); })
        .flops(flops::per_input_element)
        // The gradient reads the logits, labels and the row statistics, never an (N, C) output.
        .profile_cost([](const std::vector<TensorMeta>&, const std::vector<TensorMeta>&, const Attrs&) {
          return ProfileCost{{0, 1}, {1, 2}, 0, 0};
        })
        .vjp([](const VjpContext& ctx) {
          TensorList grads(2);
          if (ctx.needs_input_grad[0]) {
            grads[0] = apply_one(kSparseCrossEntropyGrad, {ctx.grad(0), ctx.input(0), ctx.input(1), ctx.output(1), ctx.output(2)},
                                 Attrs().set("ignore_index", ctx.attrs.get<int64_t>("ignore_index")));
          }
          return grads;
        })
        .def();

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
Tensor sparse_softmax_cross_entropy(const Tensor& logits, const Tensor& labels, int64_t ignore_index) {
  return apply(kSparseCrossEntropy, {logits, labels}, Attrs().set("ignore_index", ignore_index))[0];
}
Tensor Tensor::softmax(int64_t dim) const { return flow::softmax(*this, dim); }

}  // namespace flow
