// CPU kernels of the element-wise unary ops, over the strided loop engine.
#include <cmath>

#include "core/kernels/cpu/loop.h"
#include "core/op.h"

namespace flow::cpu {
namespace {

template <typename F>
KernelFn numeric_kernel(const char* name, F f) {
  return [name, f](KernelContext& ctx) {
    FLOW_DISPATCH_NUMERIC(ctx.inputs[0].dtype(), name, [&]<typename T>() {
      unary_loop<T, T>(ctx.outputs[0], ctx.inputs[0], [&](T x) { return f(x); });
    });
  };
}

template <typename F>
KernelFn floating_kernel(const char* name, F f) {
  return [name, f](KernelContext& ctx) {
    FLOW_DISPATCH_FLOATING(ctx.inputs[0].dtype(), name, [&]<typename T>() {
      unary_loop<T, T>(ctx.outputs[0], ctx.inputs[0], [&](T x) { return f(x); });
    });
  };
}

template <typename T>
T gelu_value(T x, bool tanh_form) {
  if (tanh_form) {
    const T inner = T(0.7978845608028654) * (x + T(0.044715) * x * x * x);
    return T(0.5) * x * (T(1) + std::tanh(inner));
  }
  return T(0.5) * x * (T(1) + std::erf(x * T(0.7071067811865476)));
}

template <typename T>
T gelu_derivative(T x, bool tanh_form) {
  if (tanh_form) {
    const T k = T(0.7978845608028654);
    const T inner = k * (x + T(0.044715) * x * x * x);
    const T t = std::tanh(inner);
    return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3 * 0.044715) * x * x);
  }
  const T cdf = T(0.5) * (T(1) + std::erf(x * T(0.7071067811865476)));
  const T pdf = std::exp(T(-0.5) * x * x) * T(0.3989422804014327);
  return cdf + x * pdf;
}

auto neg_fn = [](auto x) { return static_cast<decltype(x)>(-x); };
auto abs_fn = [](auto x) {
  using T = decltype(x);
  if constexpr (std::is_unsigned_v<T>) return x;
  else return static_cast<T>(x < 0 ? -x : x);
};
auto sign_fn = [](auto x) {
  using T = decltype(x);
  return static_cast<T>((T(0) < x) - (x < T(0)));
};
// `x < 0 ? 0 : x` keeps NaN, as PyTorch's relu does, and vectorises to a blend.
auto relu_fn = [](auto x) {
  using T = decltype(x);
  return x < T(0) ? T(0) : x;
};

void gelu_kernel(KernelContext& ctx) {
  const bool tanh_form = ctx.attrs.get<std::string>("approximate") == "tanh";
  FLOW_DISPATCH_FLOATING(ctx.inputs[0].dtype(), "gelu", [&]<typename T>() {
    unary_loop<T, T>(ctx.outputs[0], ctx.inputs[0], [&](T x) { return gelu_value(x, tanh_form); });
  });
}

void gelu_grad_kernel(KernelContext& ctx) {
  const bool tanh_form = ctx.attrs.get<std::string>("approximate") == "tanh";
  FLOW_DISPATCH_FLOATING(ctx.inputs[0].dtype(), "gelu_grad", [&]<typename T>() {
    binary_loop<T, T, T>(ctx.outputs[0], ctx.inputs[0], ctx.inputs[1],
                         [&](T g, T x) { return g * gelu_derivative(x, tanh_form); });
  });
}

void relu_grad_kernel(KernelContext& ctx) {
  FLOW_DISPATCH_NUMERIC(ctx.inputs[0].dtype(), "relu_grad", [&]<typename T>() {
    binary_loop<T, T, T>(ctx.outputs[0], ctx.inputs[0], ctx.inputs[1], [](T g, T y) { return y > T(0) ? g : T(0); });
  });
}

void clamp_kernel(KernelContext& ctx) {
  const bool has_min = ctx.attrs.get<bool>("has_min"), has_max = ctx.attrs.get<bool>("has_max");
  FLOW_DISPATCH_NUMERIC(ctx.inputs[0].dtype(), "clamp", [&]<typename T>() {
    const T lo = has_min ? ctx.attrs.get<Scalar>("min").to<T>() : std::numeric_limits<T>::lowest();
    const T hi = has_max ? ctx.attrs.get<Scalar>("max").to<T>() : std::numeric_limits<T>::max();
    // NaN stays NaN: both comparisons are false.
    unary_loop<T, T>(ctx.outputs[0], ctx.inputs[0], [&](T x) { return x < lo ? lo : (x > hi ? hi : x); });
  });
}

void logical_not_kernel(KernelContext& ctx) {
  FLOW_DISPATCH_ALL(ctx.inputs[0].dtype(), "logical_not", [&]<typename T>() {
    unary_loop<bool, T>(ctx.outputs[0], ctx.inputs[0], [](T x) { return static_cast<float>(x) == 0.0f; });
  });
}

const std::vector<DType> kFloating = floating_dtypes();
const std::vector<DType> kNumeric = numeric_dtypes();

FLOW_REGISTER_KERNEL("neg", DeviceType::kCPU, kNumeric, numeric_kernel("neg", neg_fn));
FLOW_REGISTER_KERNEL("abs", DeviceType::kCPU, kNumeric, numeric_kernel("abs", abs_fn));
FLOW_REGISTER_KERNEL("sign", DeviceType::kCPU, kNumeric, numeric_kernel("sign", sign_fn));
FLOW_REGISTER_KERNEL("relu", DeviceType::kCPU, kNumeric, numeric_kernel("relu", relu_fn));
FLOW_REGISTER_KERNEL("relu_grad", DeviceType::kCPU, kNumeric, relu_grad_kernel);
FLOW_REGISTER_KERNEL("exp", DeviceType::kCPU, kFloating, floating_kernel("exp", [](auto x) { return std::exp(x); }));
FLOW_REGISTER_KERNEL("log", DeviceType::kCPU, kFloating, floating_kernel("log", [](auto x) { return std::log(x); }));
FLOW_REGISTER_KERNEL("sqrt", DeviceType::kCPU, kFloating, floating_kernel("sqrt", [](auto x) { return std::sqrt(x); }));
FLOW_REGISTER_KERNEL("rsqrt", DeviceType::kCPU, kFloating,
                     floating_kernel("rsqrt", [](auto x) { return decltype(x)(1) / std::sqrt(x); }));
FLOW_REGISTER_KERNEL("sin", DeviceType::kCPU, kFloating, floating_kernel("sin", [](auto x) { return std::sin(x); }));
FLOW_REGISTER_KERNEL("cos", DeviceType::kCPU, kFloating, floating_kernel("cos", [](auto x) { return std::cos(x); }));
FLOW_REGISTER_KERNEL("tanh", DeviceType::kCPU, kFloating, floating_kernel("tanh", [](auto x) { return std::tanh(x); }));
FLOW_REGISTER_KERNEL("sigmoid", DeviceType::kCPU, kFloating, floating_kernel("sigmoid", [](auto x) {
                       using T = decltype(x);
                       return T(1) / (T(1) + std::exp(-x));
                     }));
FLOW_REGISTER_KERNEL("silu", DeviceType::kCPU, kFloating, floating_kernel("silu", [](auto x) {
                       using T = decltype(x);
                       return x / (T(1) + std::exp(-x));
                     }));
FLOW_REGISTER_KERNEL("gelu", DeviceType::kCPU, kFloating, gelu_kernel);
FLOW_REGISTER_KERNEL("gelu_grad", DeviceType::kCPU, kFloating, gelu_grad_kernel);
FLOW_REGISTER_KERNEL("clamp", DeviceType::kCPU, kNumeric, clamp_kernel);
FLOW_REGISTER_KERNEL("logical_not", DeviceType::kCPU, all_dtypes(), logical_not_kernel);

}  // namespace
}  // namespace flow::cpu
