// CPU kernels of the element-wise binary ops (broadcasting through the loop engine), their
// scalar forms, comparisons, logical ops and where.
#include <cmath>

#include "core/kernels/cpu/convert.h"
#include "core/kernels/cpu/elementwise_math.h"
#include "core/kernels/cpu/loop.h"
#include "core/op.h"

namespace flow::cpu {
namespace {

template <typename F>
KernelFn arithmetic(const char* name, F f) {
  return [name, f](KernelContext& ctx) {
    FLOW_DISPATCH_NUMERIC(ctx.inputs[0].dtype(), name, [&]<typename T>() {
      binary_loop<T, T, T>(ctx.outputs[0], ctx.inputs[0], ctx.inputs[1], [&](T a, T b) { return static_cast<T>(f(a, b)); });
    });
  };
}

template <typename F>
KernelFn comparison(const char* name, F f) {
  return [name, f](KernelContext& ctx) {
    FLOW_DISPATCH_ALL(ctx.inputs[0].dtype(), name, [&]<typename T>() {
      using C = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;
      binary_loop<bool, T, T>(ctx.outputs[0], ctx.inputs[0], ctx.inputs[1],
                              [&](T a, T b) { return f(static_cast<C>(a), static_cast<C>(b)); });
    });
  };
}

template <typename F>
KernelFn arithmetic_scalar(const char* name, F f) {
  return [name, f](KernelContext& ctx) {
    const Scalar& s = ctx.attrs.get<Scalar>("scalar");
    FLOW_DISPATCH_NUMERIC(ctx.inputs[0].dtype(), name, [&]<typename T>() {
      const T b = s.to<T>();
      unary_loop<T, T>(ctx.outputs[0], ctx.inputs[0], [&](T a) { return static_cast<T>(f(a, b)); });
    });
  };
}

// Comparison with a scalar happens in double for floating scalars so that 0.5 < int tensor works.
template <typename F>
KernelFn comparison_scalar(const char* name, F f) {
  return [name, f](KernelContext& ctx) {
    const Scalar& s = ctx.attrs.get<Scalar>("scalar");
    FLOW_DISPATCH_ALL(ctx.inputs[0].dtype(), name, [&]<typename T>() {
      if constexpr (std::is_floating_point_v<T>) {
        const T b = s.to<T>();
        unary_loop<bool, T>(ctx.outputs[0], ctx.inputs[0], [&](T a) { return f(a, b); });
      } else {
        const double b = s.to_double();
        unary_loop<bool, T>(ctx.outputs[0], ctx.inputs[0], [&](T a) { return f(convert<double>(a), b); });
      }
    });
  };
}

void where_kernel(KernelContext& ctx) {
  FLOW_DISPATCH_ALL(ctx.inputs[1].dtype(), "where", [&]<typename T>() {
    // The condition is read as bytes: a `bool` operand makes GCC emit a branch per element
    // instead of a vectorised blend (about 20x slower on random masks).
    ternary_loop<T, uint8_t, T, T>(ctx.outputs[0], ctx.inputs[0], ctx.inputs[1], ctx.inputs[2],
                                   [](uint8_t c, T a, T b) { return c != 0 ? a : b; });
  });
}

const std::vector<DType> kNumeric = numeric_dtypes();
const std::vector<DType> kAll = all_dtypes();

FLOW_REGISTER_KERNEL("add", DeviceType::kCPU, kNumeric, arithmetic("add", [](auto a, auto b) { return math::add(a, b); }));
FLOW_REGISTER_KERNEL("sub", DeviceType::kCPU, kNumeric, arithmetic("sub", [](auto a, auto b) { return math::sub(a, b); }));
FLOW_REGISTER_KERNEL("mul", DeviceType::kCPU, kNumeric, arithmetic("mul", [](auto a, auto b) { return math::mul(a, b); }));
FLOW_REGISTER_KERNEL("div", DeviceType::kCPU, kNumeric, arithmetic("div", [](auto a, auto b) { return math::divide(a, b); }));
FLOW_REGISTER_KERNEL("pow", DeviceType::kCPU, kNumeric, arithmetic("pow", [](auto a, auto b) { return math::power(a, b); }));
FLOW_REGISTER_KERNEL("maximum", DeviceType::kCPU, kNumeric, arithmetic("maximum", [](auto a, auto b) { return math::max_of(a, b); }));
FLOW_REGISTER_KERNEL("minimum", DeviceType::kCPU, kNumeric, arithmetic("minimum", [](auto a, auto b) { return math::min_of(a, b); }));

FLOW_REGISTER_KERNEL("eq", DeviceType::kCPU, kAll, comparison("eq", [](auto a, auto b) { return a == b; }));
FLOW_REGISTER_KERNEL("ne", DeviceType::kCPU, kAll, comparison("ne", [](auto a, auto b) { return a != b; }));
FLOW_REGISTER_KERNEL("lt", DeviceType::kCPU, kAll, comparison("lt", [](auto a, auto b) { return a < b; }));
FLOW_REGISTER_KERNEL("le", DeviceType::kCPU, kAll, comparison("le", [](auto a, auto b) { return a <= b; }));
FLOW_REGISTER_KERNEL("gt", DeviceType::kCPU, kAll, comparison("gt", [](auto a, auto b) { return a > b; }));
FLOW_REGISTER_KERNEL("ge", DeviceType::kCPU, kAll, comparison("ge", [](auto a, auto b) { return a >= b; }));
FLOW_REGISTER_KERNEL("logical_and", DeviceType::kCPU, {kBool}, comparison("logical_and", [](auto a, auto b) { return a && b; }));
FLOW_REGISTER_KERNEL("logical_or", DeviceType::kCPU, {kBool}, comparison("logical_or", [](auto a, auto b) { return a || b; }));
FLOW_REGISTER_KERNEL("logical_xor", DeviceType::kCPU, {kBool}, comparison("logical_xor", [](auto a, auto b) { return a != b; }));

FLOW_REGISTER_KERNEL("add_scalar", DeviceType::kCPU, kNumeric, arithmetic_scalar("add_scalar", [](auto a, auto b) { return math::add(a, b); }));
FLOW_REGISTER_KERNEL("sub_scalar", DeviceType::kCPU, kNumeric, arithmetic_scalar("sub_scalar", [](auto a, auto b) { return math::sub(a, b); }));
FLOW_REGISTER_KERNEL("rsub_scalar", DeviceType::kCPU, kNumeric, arithmetic_scalar("rsub_scalar", [](auto a, auto b) { return math::sub(b, a); }));
FLOW_REGISTER_KERNEL("mul_scalar", DeviceType::kCPU, kNumeric, arithmetic_scalar("mul_scalar", [](auto a, auto b) { return math::mul(a, b); }));
FLOW_REGISTER_KERNEL("div_scalar", DeviceType::kCPU, kNumeric, arithmetic_scalar("div_scalar", [](auto a, auto b) { return math::divide(a, b); }));
FLOW_REGISTER_KERNEL("rdiv_scalar", DeviceType::kCPU, kNumeric, arithmetic_scalar("rdiv_scalar", [](auto a, auto b) { return math::divide(b, a); }));
FLOW_REGISTER_KERNEL("pow_scalar", DeviceType::kCPU, kNumeric, arithmetic_scalar("pow_scalar", [](auto a, auto b) { return math::power(a, b); }));
FLOW_REGISTER_KERNEL("rpow_scalar", DeviceType::kCPU, kNumeric, arithmetic_scalar("rpow_scalar", [](auto a, auto b) { return math::power(b, a); }));

FLOW_REGISTER_KERNEL("eq_scalar", DeviceType::kCPU, kAll, comparison_scalar("eq_scalar", [](auto a, auto b) { return a == b; }));
FLOW_REGISTER_KERNEL("ne_scalar", DeviceType::kCPU, kAll, comparison_scalar("ne_scalar", [](auto a, auto b) { return a != b; }));
FLOW_REGISTER_KERNEL("lt_scalar", DeviceType::kCPU, kAll, comparison_scalar("lt_scalar", [](auto a, auto b) { return a < b; }));
FLOW_REGISTER_KERNEL("le_scalar", DeviceType::kCPU, kAll, comparison_scalar("le_scalar", [](auto a, auto b) { return a <= b; }));
FLOW_REGISTER_KERNEL("gt_scalar", DeviceType::kCPU, kAll, comparison_scalar("gt_scalar", [](auto a, auto b) { return a > b; }));
FLOW_REGISTER_KERNEL("ge_scalar", DeviceType::kCPU, kAll, comparison_scalar("ge_scalar", [](auto a, auto b) { return a >= b; }));

FLOW_REGISTER_KERNEL("where", DeviceType::kCPU, {kBool}, where_kernel);

}  // namespace
}  // namespace flow::cpu
