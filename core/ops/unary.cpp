// Element-wise unary ops: one tensor in, one out, same shape. Each vjp is written with
// functional ops so it serves eager, Graph and higher-order gradients alike.
#include "core/ops/unary.h"

#include <cmath>

#include "core/interpreter.h"
#include "core/ops/binary.h"
#include "core/ops/checks.h"
#include "core/ops/copy.h"
#include "core/ops/creation.h"
#include "core/ops/elementwise_util.h"
#include "core/ops/reduce.h"

namespace flow {
namespace {

std::vector<TensorMeta> same_meta(const std::vector<TensorMeta>& in, const Attrs&) { return {in[0]}; }

// neg and relu of bool have no meaning (PyTorch refuses them too).
InferFn not_bool(const char* op) {
  return [op](const std::vector<TensorMeta>& in, const Attrs&) {
    if (in[0].dtype == kBool) fail(op, "not supported for bool tensors; use logical_not for negation");
    return std::vector<TensorMeta>{in[0]};
  };
}

void check_approximate(const char* op, const Attrs& attrs) {
  const std::string& approximate = attrs.get<std::string>("approximate");
  if (approximate != "none" && approximate != "tanh") fail(op, "approximate must be 'none' or 'tanh', got '", approximate, "'");
}

std::vector<TensorMeta> bool_meta(const std::vector<TensorMeta>& in, const Attrs&) {
  return {{in[0].shape, kBool, in[0].device}};
}

// Most unary vjps read the input; those reading the output pass profile::elementwise_saving_output.
const OpDef& unary(const char* name, VjpFn vjp, std::vector<AttrDef> attrs = {}, InferFn infer = same_meta,
                   ProfileCostFn profile_cost = profile::elementwise_saving_inputs) {
  OpBuilder builder(name);
  builder.inputs({"input"})
      .outputs({"out"})
      .attrs(std::move(attrs))
      .strided_inputs()
      .infer(std::move(infer))
      .sbp(sbp::elementwise)
      .flops(flops::elementwise);
  if (vjp) builder.vjp(std::move(vjp)).profile_cost(std::move(profile_cost));
  return builder.def();
}

Tensor x0(const VjpContext& ctx) { return ctx.input(0); }
Tensor y0(const VjpContext& ctx) { return ctx.output(0); }

const OpDef& kNeg = unary(
    "neg", [](const VjpContext& ctx) { return TensorList{neg(ctx.grad())}; }, {}, not_bool("neg"), profile::elementwise_saving_nothing);
const OpDef& kAbs = unary("abs", [](const VjpContext& ctx) { return TensorList{ctx.grad() * sign(x0(ctx))}; });
const OpDef& kSign = unary(
    "sign", [](const VjpContext& ctx) { return TensorList{zeros_like(ctx.grad())}; }, {}, same_meta, profile::elementwise_saving_nothing);
const OpDef& kExp = unary(
    "exp", [](const VjpContext& ctx) { return TensorList{ctx.grad() * y0(ctx)}; }, {}, same_meta, profile::elementwise_saving_output);
const OpDef& kLog = unary("log", [](const VjpContext& ctx) { return TensorList{ctx.grad() / x0(ctx)}; });
const OpDef& kSqrt = unary(
    "sqrt", [](const VjpContext& ctx) { return TensorList{ctx.grad() * 0.5 / y0(ctx)}; }, {}, same_meta, profile::elementwise_saving_output);
const OpDef& kRsqrt = unary("rsqrt", [](const VjpContext& ctx) {
  const Tensor y = y0(ctx);
  return TensorList{ctx.grad() * (y * y * y) * -0.5};
}, {}, same_meta, profile::elementwise_saving_output);
const OpDef& kSin = unary("sin", [](const VjpContext& ctx) { return TensorList{ctx.grad() * cos(x0(ctx))}; });
const OpDef& kCos = unary("cos", [](const VjpContext& ctx) { return TensorList{neg(ctx.grad() * sin(x0(ctx)))}; });
const OpDef& kTanh = unary("tanh", [](const VjpContext& ctx) {
  const Tensor y = y0(ctx);
  return TensorList{ctx.grad() * (1.0 - y * y)};
}, {}, same_meta, profile::elementwise_saving_output);
const OpDef& kSigmoid = unary("sigmoid", [](const VjpContext& ctx) {
  const Tensor y = y0(ctx);
  return TensorList{ctx.grad() * y * (1.0 - y)};
}, {}, same_meta, profile::elementwise_saving_output);
// relu's gradient in one pass: grad where the output is positive, else 0.
const OpDef& kReluGrad = OpBuilder("relu_grad")
                             .inputs({"grad", "output"})
                             .outputs({"out"})
                             .strided_inputs()
                             .infer([](const std::vector<TensorMeta>& in, const Attrs&) {
                               elementwise::check_same_dtype(in, "relu_grad");
                               return std::vector<TensorMeta>{elementwise::broadcast_meta(in, in[0].dtype, "relu_grad")};
                             })
                             .sbp(sbp::elementwise)
                             .flops(flops::elementwise)
                             .vjp([](const VjpContext& ctx) {
                               return TensorList{apply_one(find_op("relu_grad"), {ctx.grad(), ctx.input(1)}), Tensor()};
                             })
                             .def();
const OpDef& kRelu = unary(
    "relu", [](const VjpContext& ctx) { return TensorList{apply_one(kReluGrad, {ctx.grad(), y0(ctx)})}; }, {}, not_bool("relu"),
    profile::elementwise_saving_output);
const OpDef& kSilu = unary("silu", [](const VjpContext& ctx) {
  const Tensor x = x0(ctx);
  const Tensor s = sigmoid(x);
  return TensorList{ctx.grad() * s * (1.0 + x * (1.0 - s))};
});

// sigmoid(beta * x) below the threshold, 1 above it (where the forward is x itself); written in
// functional ops, so second order comes from sigmoid's and where's vjps.
const OpDef& kSoftplus = unary(
    "softplus",
    [](const VjpContext& ctx) {
      const Tensor scaled = x0(ctx) * ctx.attrs.get<double>("beta");
      return TensorList{where(gt(scaled, ctx.attrs.get<double>("threshold")), ctx.grad(), ctx.grad() * sigmoid(scaled))};
    },
    {{"beta", AttrType::kDouble}, {"threshold", AttrType::kDouble}});

// gelu's second derivative at x, in functional ops: exact, phi(x) (2 - x^2) with phi the normal
// density; tanh, with t = tanh(u), u = c (x + a x^3), u' = c (1 + 3 a x^2):
// (1 - t^2) (u' - x t u'^2 + 3 a c x^2).
Tensor gelu_second_derivative(const Tensor& x, const std::string& approximate) {
  if (approximate == "none") return exp(x * x * -0.5) * (1.0 / std::sqrt(2.0 * M_PI)) * (2.0 - x * x);
  const double c = std::sqrt(2.0 / M_PI), a = 0.044715;
  const Tensor t = tanh((x + x * x * x * a) * c);
  const Tensor du = (x * x * (3.0 * a) + 1.0) * c;
  return (1.0 - t * t) * (du - x * t * du * du + x * x * (3.0 * a * c));
}

// gelu's derivative has no short functional form (erf is not an op), so it is an op of its own.
// Its vjp: linear in grad (gelu_grad again), and grad times the second derivative for the input.
const OpDef& kGeluGrad = OpBuilder("gelu_grad")
                             .inputs({"grad", "input"})
                             .outputs({"out"})
                             .attrs({{"approximate", AttrType::kString}})
                             .strided_inputs()
                             .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
                               check_approximate("gelu_grad", attrs);
                               elementwise::check_same_dtype(in, "gelu_grad");
                               return std::vector<TensorMeta>{elementwise::broadcast_meta(in, in[0].dtype, "gelu_grad")};
                             })
                             .sbp(sbp::elementwise)
                             .flops(flops::elementwise)
                             .vjp([](const VjpContext& ctx) {
                               const std::string& approximate = ctx.attrs.get<std::string>("approximate");
                               const Tensor x = ctx.input(1);
                               TensorList grads(2);
                               if (ctx.needs_input_grad[0]) {
                                 grads[0] = sum_to(apply_one(kGeluGrad, {ctx.grad(), x}, Attrs().set("approximate", approximate)),
                                                   ctx.input_meta(0).shape);
                               }
                               if (ctx.needs_input_grad[1]) {
                                 grads[1] = sum_to(ctx.grad() * ctx.input(0) * gelu_second_derivative(x, approximate), ctx.input_meta(1).shape);
                               }
                               return grads;
                             })
                             .def();
const OpDef& kGelu = unary(
    "gelu",
    [](const VjpContext& ctx) {
      return TensorList{apply_one(kGeluGrad, {ctx.grad(), x0(ctx)}, Attrs().set("approximate", ctx.attrs.get<std::string>("approximate")))};
    },
    {{"approximate", AttrType::kString}}, [](const std::vector<TensorMeta>& in, const Attrs& attrs) {
      check_approximate("gelu", attrs);
      return std::vector<TensorMeta>{in[0]};
    });

const OpDef& kClamp = unary(
    "clamp",
    [](const VjpContext& ctx) {
      const Tensor x = x0(ctx);
      Tensor inside = ones_like(x, kBool);
      if (ctx.attrs.get<bool>("has_min")) inside = logical_and(inside, ge(x, ctx.attrs.get<Scalar>("min")));
      if (ctx.attrs.get<bool>("has_max")) inside = logical_and(inside, le(x, ctx.attrs.get<Scalar>("max")));
      return TensorList{where(inside, ctx.grad(), 0)};
    },
    {{"min", AttrType::kScalar}, {"max", AttrType::kScalar}, {"has_min", AttrType::kBool}, {"has_max", AttrType::kBool}},
    [](const std::vector<TensorMeta>& in, const Attrs& attrs) {
      const bool has_min = attrs.get<bool>("has_min"), has_max = attrs.get<bool>("has_max");
      if (!has_min && !has_max) fail("clamp", "at least one of min or max must be given");
      if (in[0].dtype == kBool) fail("clamp", "not supported for bool tensors");
      if (has_min) checks::check_scalar_fits("clamp", attrs.get<Scalar>("min"), in[0].dtype, "min");
      if (has_max) checks::check_scalar_fits("clamp", attrs.get<Scalar>("max"), in[0].dtype, "max");
      return std::vector<TensorMeta>{in[0]};
    });

const OpDef& kLogicalNot = unary("logical_not", nullptr, {}, bool_meta);

// Floating functions of integer tensors compute in the default float type, like PyTorch.
Tensor floating(const Tensor& input) { return input.is_floating_point() ? input : to(input, kDefaultFloat); }

Tensor run(const OpDef& op, const Tensor& input, const Attrs& attrs = {}) { return apply_one(op, {input}, attrs); }

}  // namespace

Tensor neg(const Tensor& input) { return run(kNeg, input); }
Tensor abs(const Tensor& input) { return run(kAbs, input); }
Tensor sign(const Tensor& input) { return run(kSign, input); }
Tensor exp(const Tensor& input) { return run(kExp, floating(input)); }
Tensor log(const Tensor& input) { return run(kLog, floating(input)); }
Tensor sqrt(const Tensor& input) { return run(kSqrt, floating(input)); }
Tensor rsqrt(const Tensor& input) { return run(kRsqrt, floating(input)); }
Tensor sin(const Tensor& input) { return run(kSin, floating(input)); }
Tensor cos(const Tensor& input) { return run(kCos, floating(input)); }
Tensor tanh(const Tensor& input) { return run(kTanh, floating(input)); }
Tensor sigmoid(const Tensor& input) { return run(kSigmoid, floating(input)); }
Tensor relu(const Tensor& input) { return run(kRelu, input); }
Tensor silu(const Tensor& input) { return run(kSilu, floating(input)); }
Tensor softplus(const Tensor& input, double beta, double threshold) {
  return run(kSoftplus, floating(input), Attrs().set("beta", beta).set("threshold", threshold));
}

Tensor gelu(const Tensor& input, const std::string& approximate) {
  return run(kGelu, floating(input), Attrs().set("approximate", approximate));
}

Tensor clamp(const Tensor& input, std::optional<Scalar> min, std::optional<Scalar> max) {
  const bool needs_float = !input.is_floating_point() && ((min && min->is_floating()) || (max && max->is_floating()));
  return run(kClamp, needs_float ? to(input, kDefaultFloat) : input,
             Attrs()
                 .set("min", min.value_or(0))
                 .set("max", max.value_or(0))
                 .set("has_min", min.has_value())
                 .set("has_max", max.has_value()));
}

Tensor logical_not(const Tensor& input) { return run(kLogicalNot, input); }

Tensor Tensor::exp() const { return flow::exp(*this); }
Tensor Tensor::log() const { return flow::log(*this); }
Tensor Tensor::relu() const { return flow::relu(*this); }
Tensor Tensor::abs() const { return flow::abs(*this); }
Tensor Tensor::sqrt() const { return flow::sqrt(*this); }
Tensor operator-(const Tensor& a) { return neg(a); }

}  // namespace flow
