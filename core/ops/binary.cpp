// Element-wise binary ops with NumPy broadcasting, their tensor-scalar forms, comparisons,
// logical ops and where. Primitives take inputs of one dtype; the functional wrappers promote.
#include "core/ops/binary.h"

#include <cmath>

#include "core/interpreter.h"
#include "core/ops/checks.h"
#include "core/ops/copy.h"
#include "core/ops/creation.h"
#include "core/ops/elementwise_util.h"
#include "core/ops/reduce.h"
#include "core/ops/unary.h"

namespace flow {
namespace {

InferFn binary_infer(const char* op, bool bool_output) {
  return [op, bool_output](const std::vector<TensorMeta>& in, const Attrs&) {
    elementwise::check_same_dtype(in, op);
    return std::vector<TensorMeta>{elementwise::broadcast_meta(in, bool_output ? kBool : in[0].dtype, op)};
  };
}

// Most binary vjps read both inputs; add and sub pass profile::elementwise_saving_nothing.
const OpDef& binary(const char* name, VjpFn vjp, bool bool_output = false, SbpFn sbp_fn = sbp::elementwise,
                    ProfileCostFn profile_cost = profile::elementwise_saving_inputs) {
  OpBuilder builder(name);
  builder.inputs({"a", "b"}).outputs({"out"}).strided_inputs().infer(binary_infer(name, bool_output)).sbp(std::move(sbp_fn)).flops(
      flops::elementwise);
  if (vjp) builder.vjp(std::move(vjp)).profile_cost(std::move(profile_cost));
  return builder.def();
}

// Tensor-scalar op: the scalar is the attribute "scalar"; output dtype as the input's. Arithmetic
// converts the scalar to the input's dtype, comparisons compare in double.
const OpDef& scalar_op(const char* name, VjpFn vjp, bool bool_output = false, SbpFn sbp_fn = sbp::elementwise) {
  OpBuilder builder(name);
  builder.inputs({"input"})
      .outputs({"out"})
      .attrs({{"scalar", AttrType::kScalar}})
      .strided_inputs()
      .infer([name, bool_output](const std::vector<TensorMeta>& in, const Attrs& attrs) {
        if (!bool_output) checks::check_scalar_fits(name, attrs.get<Scalar>("scalar"), in[0].dtype, "scalar");
        return std::vector<TensorMeta>{{in[0].shape, bool_output ? kBool : in[0].dtype, in[0].device}};
      })
      .sbp(std::move(sbp_fn))
      .flops(flops::elementwise);
  if (vjp) builder.vjp(std::move(vjp));
  return builder.def();
}

// Gradient of a broadcast operand: summed back to the operand's shape.
Tensor reduce_to(const Tensor& grad, const VjpContext& ctx, size_t input) {
  return sum_to(grad, ctx.input_meta(input).shape);
}
const Scalar& scalar_attr(const VjpContext& ctx) { return ctx.attrs.get<Scalar>("scalar"); }

const OpDef& kAdd = binary(
    "add", [](const VjpContext& ctx) { return TensorList{reduce_to(ctx.grad(), ctx, 0), reduce_to(ctx.grad(), ctx, 1)}; }, false,
    sbp::linear_elementwise, profile::elementwise_saving_nothing);
const OpDef& kSub = binary(
    "sub", [](const VjpContext& ctx) { return TensorList{reduce_to(ctx.grad(), ctx, 0), reduce_to(neg(ctx.grad()), ctx, 1)}; },
    false, sbp::linear_elementwise, profile::elementwise_saving_nothing);
const OpDef& kMul = binary("mul", [](const VjpContext& ctx) {
  TensorList grads(2);
  if (ctx.needs_input_grad[0]) grads[0] = reduce_to(ctx.grad() * ctx.input(1), ctx, 0);
  if (ctx.needs_input_grad[1]) grads[1] = reduce_to(ctx.grad() * ctx.input(0), ctx, 1);
  return grads;
});
const OpDef& kDiv = binary("div", [](const VjpContext& ctx) {
  const Tensor b = ctx.input(1);
  TensorList grads(2);
  if (ctx.needs_input_grad[0]) grads[0] = reduce_to(ctx.grad() / b, ctx, 0);
  if (ctx.needs_input_grad[1]) grads[1] = reduce_to(neg(ctx.grad() * ctx.input(0) / (b * b)), ctx, 1);
  return grads;
});
// The vjp reads both inputs and the output.
ProfileCost pow_profile_cost(const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out, const Attrs& attrs) {
  ProfileCost cost = profile::elementwise_saving_inputs(in, out, attrs);
  cost.saved_outputs.push_back(0);
  return cost;
}
const OpDef& kPow = binary(
    "pow",
    [](const VjpContext& ctx) {
      const Tensor a = ctx.input(0), b = ctx.input(1);
      TensorList grads(2);
      if (ctx.needs_input_grad[0]) grads[0] = reduce_to(ctx.grad() * b * pow(a, b - 1), ctx, 0);
      if (ctx.needs_input_grad[1]) grads[1] = reduce_to(ctx.grad() * ctx.output(0) * log(a), ctx, 1);
      return grads;
    },
    false, sbp::elementwise, pow_profile_cost);
// Ties send the gradient to the first operand.
const OpDef& kMaximum = binary("maximum", [](const VjpContext& ctx) {
  const Tensor first = ge(ctx.input(0), ctx.input(1));
  return TensorList{reduce_to(where(first, ctx.grad(), 0), ctx, 0), reduce_to(where(first, 0, ctx.grad()), ctx, 1)};
});
const OpDef& kMinimum = binary("minimum", [](const VjpContext& ctx) {
  const Tensor first = le(ctx.input(0), ctx.input(1));
  return TensorList{reduce_to(where(first, ctx.grad(), 0), ctx, 0), reduce_to(where(first, 0, ctx.grad()), ctx, 1)};
});

const OpDef& kEq = binary("eq", nullptr, true);
const OpDef& kNe = binary("ne", nullptr, true);
const OpDef& kLt = binary("lt", nullptr, true);
const OpDef& kLe = binary("le", nullptr, true);
const OpDef& kGt = binary("gt", nullptr, true);
const OpDef& kGe = binary("ge", nullptr, true);
const OpDef& kLogicalAnd = binary("logical_and", nullptr, true);
const OpDef& kLogicalOr = binary("logical_or", nullptr, true);
const OpDef& kLogicalXor = binary("logical_xor", nullptr, true);

const OpDef& kAddScalar = scalar_op("add_scalar", [](const VjpContext& ctx) { return TensorList{ctx.grad()}; });
const OpDef& kSubScalar = scalar_op("sub_scalar", [](const VjpContext& ctx) { return TensorList{ctx.grad()}; });
const OpDef& kRsubScalar = scalar_op("rsub_scalar", [](const VjpContext& ctx) { return TensorList{neg(ctx.grad())}; });
const OpDef& kMulScalar =
    scalar_op("mul_scalar", [](const VjpContext& ctx) { return TensorList{ctx.grad() * scalar_attr(ctx)}; }, false,
              sbp::linear_elementwise);
const OpDef& kDivScalar =
    scalar_op("div_scalar", [](const VjpContext& ctx) { return TensorList{ctx.grad() / scalar_attr(ctx)}; }, false,
              sbp::linear_elementwise);
const OpDef& kRdivScalar = scalar_op("rdiv_scalar", [](const VjpContext& ctx) {
  return TensorList{neg(ctx.grad() * ctx.output(0) / ctx.input(0))};
});
const OpDef& kPowScalar = scalar_op("pow_scalar", [](const VjpContext& ctx) {
  const double exponent = scalar_attr(ctx).to_double();
  return TensorList{ctx.grad() * exponent * pow(ctx.input(0), exponent - 1)};
});
const OpDef& kRpowScalar = scalar_op("rpow_scalar", [](const VjpContext& ctx) {
  return TensorList{ctx.grad() * ctx.output(0) * std::log(scalar_attr(ctx).to_double())};
});
const OpDef& kEqScalar = scalar_op("eq_scalar", nullptr, true);
const OpDef& kNeScalar = scalar_op("ne_scalar", nullptr, true);
const OpDef& kLtScalar = scalar_op("lt_scalar", nullptr, true);
const OpDef& kLeScalar = scalar_op("le_scalar", nullptr, true);
const OpDef& kGtScalar = scalar_op("gt_scalar", nullptr, true);
const OpDef& kGeScalar = scalar_op("ge_scalar", nullptr, true);

const OpDef& kWhere =
    OpBuilder("where")
        .inputs({"condition", "a", "b"})
        .outputs({"out"})
        .strided_inputs()
        .infer([](const std::vector<TensorMeta>& in, const Attrs&) {
          if (in[0].dtype != kBool) fail("where", "condition must be a bool tensor, got ", dtype_name(in[0].dtype));
          elementwise::check_same_dtype({in[1], in[2]}, "where");
          return std::vector<TensorMeta>{elementwise::broadcast_meta(in, in[1].dtype, "where")};
        })
        .sbp(sbp::elementwise)
        .flops(flops::elementwise)
        .vjp([](const VjpContext& ctx) {
          const Tensor condition = ctx.input(0);
          return TensorList{Tensor(), reduce_to(where(condition, ctx.grad(), 0), ctx, 1),
                            reduce_to(where(condition, 0, ctx.grad()), ctx, 2)};
        })
        .def();

// Binary op on a and b converted to their promoted dtype (true_divide: integers give float).
Tensor promoted(const OpDef& op, const Tensor& a, const Tensor& b, bool true_divide = false) {
  DType dtype = promote_types(a.dtype(), b.dtype());
  if (true_divide && !is_floating(dtype)) dtype = kDefaultFloat;
  return apply_one(op, {to(a, dtype), to(b, dtype)});
}

// Tensor-scalar op; an integral tensor with a floating scalar computes in the default float.
Tensor with_scalar(const OpDef& op, const Tensor& a, const Scalar& s, bool true_divide = false) {
  const bool to_float = !a.is_floating_point() && (s.is_floating() || true_divide);
  return apply_one(op, {to_float ? to(a, kDefaultFloat) : a}, Attrs().set("scalar", s));
}

Tensor compare_scalar(const OpDef& op, const Tensor& a, const Scalar& s) {
  const bool to_float = !a.is_floating_point() && s.is_floating();
  return apply_one(op, {to_float ? to(a, kDefaultFloat) : a}, Attrs().set("scalar", s));
}

Tensor as_bool(const Tensor& t) { return to(t, kBool); }

}  // namespace

Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  return promoted(kAdd, a, alpha.to_double() == 1.0 ? b : mul(b, alpha));
}
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  // Checked before promotion, which would turn a bool operand into a number.
  if (a.dtype() == kBool || b.dtype() == kBool) fail("sub", "subtraction of bool tensors is not supported");
  return promoted(kSub, a, alpha.to_double() == 1.0 ? b : mul(b, alpha));
}
Tensor mul(const Tensor& a, const Tensor& b) { return promoted(kMul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return promoted(kDiv, a, b, true); }
Tensor pow(const Tensor& a, const Tensor& b) { return promoted(kPow, a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return promoted(kMaximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return promoted(kMinimum, a, b); }

Tensor add(const Tensor& a, const Scalar& b) { return with_scalar(kAddScalar, a, b); }
Tensor sub(const Tensor& a, const Scalar& b) { return with_scalar(kSubScalar, a, b); }
Tensor mul(const Tensor& a, const Scalar& b) { return with_scalar(kMulScalar, a, b); }
Tensor div(const Tensor& a, const Scalar& b) { return with_scalar(kDivScalar, a, b, true); }
Tensor pow(const Tensor& a, const Scalar& exponent) { return with_scalar(kPowScalar, a, exponent); }
Tensor pow(const Scalar& base, const Tensor& exponent) { return with_scalar(kRpowScalar, exponent, base); }

Tensor eq(const Tensor& a, const Tensor& b) { return promoted(kEq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return promoted(kNe, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return promoted(kLt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return promoted(kLe, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return promoted(kGt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return promoted(kGe, a, b); }
Tensor eq(const Tensor& a, const Scalar& b) { return compare_scalar(kEqScalar, a, b); }
Tensor ne(const Tensor& a, const Scalar& b) { return compare_scalar(kNeScalar, a, b); }
Tensor lt(const Tensor& a, const Scalar& b) { return compare_scalar(kLtScalar, a, b); }
Tensor le(const Tensor& a, const Scalar& b) { return compare_scalar(kLeScalar, a, b); }
Tensor gt(const Tensor& a, const Scalar& b) { return compare_scalar(kGtScalar, a, b); }
Tensor ge(const Tensor& a, const Scalar& b) { return compare_scalar(kGeScalar, a, b); }

Tensor logical_and(const Tensor& a, const Tensor& b) { return apply_one(kLogicalAnd, {as_bool(a), as_bool(b)}); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return apply_one(kLogicalOr, {as_bool(a), as_bool(b)}); }
Tensor logical_xor(const Tensor& a, const Tensor& b) { return apply_one(kLogicalXor, {as_bool(a), as_bool(b)}); }

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  const DType dtype = promote_types(a.dtype(), b.dtype());
  return apply_one(kWhere, {condition, to(a, dtype), to(b, dtype)});
}

Tensor where(const Tensor& condition, const Tensor& a, const Scalar& b) {
  return where(condition, a, full({}, b, TensorOptions(a.dtype()).device(a.device())));
}

Tensor where(const Tensor& condition, const Scalar& a, const Tensor& b) {
  return where(condition, full({}, a, TensorOptions(b.dtype()).device(b.device())), b);
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  const Tensor x = to(a, kFloat64), y = to(b, kFloat64);
  const Tensor close = le(abs(x - y), abs(y) * rtol + atol);
  Tensor ok = logical_or(close, eq(x, y));  // equal infinities
  if (equal_nan) ok = logical_or(ok, logical_and(ne(x, x), ne(y, y)));
  return all(ok);
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, const Scalar& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Scalar& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Scalar& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Scalar& b) { return div(a, b); }
Tensor operator+(const Scalar& a, const Tensor& b) { return add(b, a); }
Tensor operator-(const Scalar& a, const Tensor& b) { return with_scalar(kRsubScalar, b, a); }
Tensor operator*(const Scalar& a, const Tensor& b) { return mul(b, a); }
Tensor operator/(const Scalar& a, const Tensor& b) { return with_scalar(kRdivScalar, b, a, true); }

Tensor Tensor::pow(const Scalar& exponent) const { return flow::pow(*this, exponent); }

}  // namespace flow
