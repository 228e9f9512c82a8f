// CPU kernels of the element-wise unary ops, over the strided loop engine.
#include <cmath>
#include <initializer_list>

#include "core/kernels/cpu/dnnl_util.h"
#include "core/kernels/cpu/elementwise_math.h"
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

// The form is chosen outside the loops: a branch inside keeps them from vectorising.
void gelu_kernel(KernelContext& ctx) {
  const bool tanh_form = ctx.attrs.get<std::string>("approximate") == "tanh";
  FLOW_DISPATCH_FLOATING(ctx.inputs[0].dtype(), "gelu", [&]<typename T>() {
    if (tanh_form) unary_loop<T, T>(ctx.outputs[0], ctx.inputs[0], [](T x) { return math::gelu(x, true); });
    else unary_loop<T, T>(ctx.outputs[0], ctx.inputs[0], [](T x) { return math::gelu(x, false); });
  });
}

void gelu_grad_kernel(KernelContext& ctx) {
  const bool tanh_form = ctx.attrs.get<std::string>("approximate") == "tanh";
  FLOW_DISPATCH_FLOATING(ctx.inputs[0].dtype(), "gelu_grad", [&]<typename T>() {
    const Tensor &grad = ctx.inputs[0], &x = ctx.inputs[1];
    if (tanh_form) binary_loop<T, T, T>(ctx.outputs[0], grad, x, [](T g, T v) { return g * math::gelu_derivative(v, true); });
    else binary_loop<T, T, T>(ctx.outputs[0], grad, x, [](T g, T v) { return g * math::gelu_derivative(v, false); });
  });
}

// bfloat16 GELU and its gradient widen each element as they read it and round once as they write:
// the float32 kernels' results on the widened inputs, rounded, without float32 copies of them.
// Contiguous tensors of one shape go through loops compiled for AVX-512 where the CPU has it
// (FLOW_AVX512_CORE_TARGET: GCC vectorises them 16 floats wide; the same scalar operations, so
// the same bits), any other layout through the strided loop engine.
template <bool kTanh>
[[gnu::always_inline]] inline BFloat16 gelu_bf16(BFloat16 x) {
  return BFloat16(math::gelu(static_cast<float>(x), kTanh));
}
template <bool kTanh>
[[gnu::always_inline]] inline BFloat16 gelu_grad_bf16(BFloat16 g, BFloat16 x) {
  return BFloat16(static_cast<float>(g) * math::gelu_derivative(static_cast<float>(x), kTanh));
}

template <bool kTanh>
FLOW_AVX512_CORE_TARGET void gelu_bf16_avx512(const BFloat16* x, BFloat16* y, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) y[i] = gelu_bf16<kTanh>(x[i]);
}
template <bool kTanh>
FLOW_AVX512_CORE_TARGET void gelu_grad_bf16_avx512(const BFloat16* g, const BFloat16* x, BFloat16* dx, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) dx[i] = gelu_grad_bf16<kTanh>(g[i], x[i]);
}

// Whether the AVX-512 loops can take these tensors: contiguous, all of the output's shape.
bool dense_avx512(const Tensor& out, std::initializer_list<const Tensor*> inputs) {
  if (!dnnl_util::has_avx512_core() || !out.is_contiguous()) return false;
  for (const Tensor* t : inputs) {
    if (!t->is_contiguous() || !(t->shape() == out.shape())) return false;
  }
  return true;
}

template <bool kTanh>
void gelu_bf16_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  Tensor& y = ctx.outputs[0];
  if (!dense_avx512(y, {&x})) return unary_loop<BFloat16, BFloat16>(y, x, gelu_bf16<kTanh>);
  const auto* in = static_cast<const BFloat16*>(x.data_ptr());
  auto* out = static_cast<BFloat16*>(y.data_ptr());
  parallel_for(0, y.numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) { gelu_bf16_avx512<kTanh>(in, out, begin, end); });
}

template <bool kTanh>
void gelu_grad_bf16_kernel(KernelContext& ctx) {
  const Tensor &g = ctx.inputs[0], &x = ctx.inputs[1];
  Tensor& dx = ctx.outputs[0];
  if (!dense_avx512(dx, {&g, &x})) return binary_loop<BFloat16, BFloat16, BFloat16>(dx, g, x, gelu_grad_bf16<kTanh>);
  const auto* grad = static_cast<const BFloat16*>(g.data_ptr());
  const auto* in = static_cast<const BFloat16*>(x.data_ptr());
  auto* out = static_cast<BFloat16*>(dx.data_ptr());
  parallel_for(0, dx.numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) { gelu_grad_bf16_avx512<kTanh>(grad, in, out, begin, end); });
}

void gelu_bf16_dispatch(KernelContext& ctx) {
  if (ctx.attrs.get<std::string>("approximate") == "tanh") gelu_bf16_kernel<true>(ctx);
  else gelu_bf16_kernel<false>(ctx);
}

void gelu_grad_bf16_dispatch(KernelContext& ctx) {
  if (ctx.attrs.get<std::string>("approximate") == "tanh") gelu_grad_bf16_kernel<true>(ctx);
  else gelu_grad_bf16_kernel<false>(ctx);
}

// PyTorch's formula and order of operations (log1p of exp), linear above the threshold.
void softplus_kernel(KernelContext& ctx) {
  const double beta = ctx.attrs.get<double>("beta"), threshold = ctx.attrs.get<double>("threshold");
  FLOW_DISPATCH_FLOATING(ctx.inputs[0].dtype(), "softplus", [&]<typename T>() {
    const T b = static_cast<T>(beta), t = static_cast<T>(threshold);
    unary_loop<T, T>(ctx.outputs[0], ctx.inputs[0], [b, t](T x) { return x * b > t ? x : std::log1p(std::exp(x * b)) / b; });
  });
}

void relu_grad_kernel(KernelContext& ctx) {
  FLOW_DISPATCH_NUMERIC(ctx.inputs[0].dtype(), "relu_grad", [&]<typename T>() {
    binary_loop<T, T, T>(ctx.outputs[0], ctx.inputs[0], ctx.inputs[1], [](T g, T y) { return math::relu_grad(g, y); });
  });
}

void clamp_kernel(KernelContext& ctx) {
  const bool has_min = ctx.attrs.get<bool>("has_min"), has_max = ctx.attrs.get<bool>("has_max");
  FLOW_DISPATCH_NUMERIC(ctx.inputs[0].dtype(), "clamp", [&]<typename T>() {
    const T lo = has_min ? ctx.attrs.get<Scalar>("min").to<T>() : std::numeric_limits<T>::lowest();
    const T hi = has_max ? ctx.attrs.get<Scalar>("max").to<T>() : std::numeric_limits<T>::max();
    unary_loop<T, T>(ctx.outputs[0], ctx.inputs[0], [&](T x) { return math::clamp(x, lo, hi); });
  });
}

void logical_not_kernel(KernelContext& ctx) {
  FLOW_DISPATCH_ALL(ctx.inputs[0].dtype(), "logical_not", [&]<typename T>() {
    unary_loop<bool, T>(ctx.outputs[0], ctx.inputs[0], [](T x) { return static_cast<float>(x) == 0.0f; });
  });
}

// Selections are exact in bfloat16: relu and its gradient run on bfloat16 directly, giving the
// float32 kernel's results on the widened values without widening and rounding every element.
void relu_bf16_kernel(KernelContext& ctx) {
  unary_loop<BFloat16, BFloat16>(ctx.outputs[0], ctx.inputs[0], [](BFloat16 x) { return math::relu(x); });
}

void relu_grad_bf16_kernel(KernelContext& ctx) {
  binary_loop<BFloat16, BFloat16, BFloat16>(ctx.outputs[0], ctx.inputs[0], ctx.inputs[1],
                                            [](BFloat16 g, BFloat16 y) { return math::relu_grad(g, y); });
}

const std::vector<DType> kFloating = floating_dtypes();
const std::vector<DType> kNumeric = numeric_dtypes();

FLOW_REGISTER_KERNEL("neg", DeviceType::kCPU, kNumeric, numeric_kernel("neg", [](auto x) { return math::neg(x); }));
FLOW_REGISTER_KERNEL("abs", DeviceType::kCPU, kNumeric, numeric_kernel("abs", [](auto x) { return math::abs(x); }));
FLOW_REGISTER_KERNEL("sign", DeviceType::kCPU, kNumeric, numeric_kernel("sign", [](auto x) { return math::sign(x); }));
FLOW_REGISTER_KERNEL("relu", DeviceType::kCPU, kNumeric, numeric_kernel("relu", [](auto x) { return math::relu(x); }));
FLOW_REGISTER_KERNEL("relu_grad", DeviceType::kCPU, kNumeric, relu_grad_kernel);
FLOW_REGISTER_KERNEL("relu", DeviceType::kCPU, {kBFloat16}, relu_bf16_kernel);
FLOW_REGISTER_KERNEL("relu_grad", DeviceType::kCPU, {kBFloat16}, relu_grad_bf16_kernel);
FLOW_REGISTER_KERNEL("exp", DeviceType::kCPU, kFloating, floating_kernel("exp", [](auto x) { return math::exp(x); }));
FLOW_REGISTER_KERNEL("log", DeviceType::kCPU, kFloating, floating_kernel("log", [](auto x) { return std::log(x); }));
FLOW_REGISTER_KERNEL("sqrt", DeviceType::kCPU, kFloating, floating_kernel("sqrt", [](auto x) { return std::sqrt(x); }));
FLOW_REGISTER_KERNEL("rsqrt", DeviceType::kCPU, kFloating,
                     floating_kernel("rsqrt", [](auto x) { return math::rsqrt(x); }));
FLOW_REGISTER_KERNEL("sin", DeviceType::kCPU, kFloating, floating_kernel("sin", [](auto x) { return std::sin(x); }));
FLOW_REGISTER_KERNEL("cos", DeviceType::kCPU, kFloating, floating_kernel("cos", [](auto x) { return std::cos(x); }));
FLOW_REGISTER_KERNEL("tanh", DeviceType::kCPU, kFloating, floating_kernel("tanh", [](auto x) { return std::tanh(x); }));
FLOW_REGISTER_KERNEL("sigmoid", DeviceType::kCPU, kFloating, floating_kernel("sigmoid", [](auto x) { return math::sigmoid(x); }));
FLOW_REGISTER_KERNEL("silu", DeviceType::kCPU, kFloating, floating_kernel("silu", [](auto x) { return math::silu(x); }));
FLOW_REGISTER_KERNEL("softplus", DeviceType::kCPU, kFloating, softplus_kernel);
FLOW_REGISTER_KERNEL("gelu", DeviceType::kCPU, kFloating, gelu_kernel);
FLOW_REGISTER_KERNEL("gelu_grad", DeviceType::kCPU, kFloating, gelu_grad_kernel);
FLOW_REGISTER_KERNEL("gelu", DeviceType::kCPU, {kBFloat16}, gelu_bf16_dispatch);
FLOW_REGISTER_KERNEL("gelu_grad", DeviceType::kCPU, {kBFloat16}, gelu_grad_bf16_dispatch);
FLOW_REGISTER_KERNEL("clamp", DeviceType::kCPU, kNumeric, clamp_kernel);
FLOW_REGISTER_KERNEL("logical_not", DeviceType::kCPU, all_dtypes(), logical_not_kernel);

}  // namespace
}  // namespace flow::cpu
