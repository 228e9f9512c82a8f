// CPU kernels of the reductions (sum, prod, max, min over dims; arg/values+indices along a dim).
#include <cmath>
#include <limits>

#include "core/kernels/cpu/elementwise_math.h"
#include "core/kernels/cpu/reduce_loop.h"
#include "core/op.h"

namespace flow::cpu {
namespace {

constexpr int kLanes = 16;

// Folds with kLanes independent accumulators so the loop vectorises without reassociation flags.
template <typename T, typename Acc, typename Op>
Acc fold_lanes(Acc init, const T* p, int64_t n, Acc identity, Op op) {
  Acc lanes[kLanes];
  for (auto& lane : lanes) lane = identity;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) lanes[j] = op(lanes[j], static_cast<Acc>(p[i + j]));
  }
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int j = 0; j < width; ++j) lanes[j] = op(lanes[j], lanes[j + width]);
  }
  Acc acc = op(init, lanes[0]);
  for (; i < n; ++i) acc = op(acc, static_cast<Acc>(p[i]));
  return acc;
}

template <typename T, typename A>
struct SumReducer {
  using Acc = A;
  Acc identity() const { return Acc(0); }
  Acc fold(Acc init, const T* p, int64_t n) const { return fold_lanes<T, Acc>(init, p, n, Acc(0), [](Acc a, Acc b) { return math::add(a, b); }); }
  Acc combine(Acc a, Acc b) const { return math::add(a, b); }
  void fold_row(Acc* acc, const T* row, int64_t n) const {
    for (int64_t i = 0; i < n; ++i) acc[i] = math::add(acc[i], static_cast<Acc>(row[i]));
  }
  Acc finish(Acc a, int64_t) const { return a; }
};

template <typename T, typename A>
struct ProdReducer {
  using Acc = A;
  Acc identity() const { return Acc(1); }
  Acc fold(Acc init, const T* p, int64_t n) const { return fold_lanes<T, Acc>(init, p, n, Acc(1), [](Acc a, Acc b) { return math::mul(a, b); }); }
  Acc combine(Acc a, Acc b) const { return math::mul(a, b); }
  void fold_row(Acc* acc, const T* row, int64_t n) const {
    for (int64_t i = 0; i < n; ++i) acc[i] = math::mul(acc[i], static_cast<Acc>(row[i]));
  }
  Acc finish(Acc a, int64_t) const { return a; }
};

// max (is_max) or min; NaN wins, as in PyTorch. The comparison form `b > a ? b : a` vectorises;
// NaN is tracked on the side with `x != x`.
template <typename T, bool is_max>
struct ExtremumReducer {
  struct Acc {
    T value;
    bool nan;
  };
  static T pick(T a, T b) {
    if constexpr (is_max) return b > a ? b : a;
    else return b < a ? b : a;
  }
  static T start() { return is_max ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max(); }
  Acc identity() const { return {start(), false}; }
  Acc fold(Acc init, const T* p, int64_t n) const {
    T lanes[kLanes];
    bool nan_lanes[kLanes];
    for (int j = 0; j < kLanes; ++j) {
      lanes[j] = start();
      nan_lanes[j] = false;
    }
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      for (int j = 0; j < kLanes; ++j) {
        lanes[j] = pick(lanes[j], p[i + j]);
        nan_lanes[j] |= p[i + j] != p[i + j];
      }
    }
    Acc acc = init;
    for (int j = 0; j < kLanes; ++j) acc = combine(acc, {lanes[j], nan_lanes[j]});
    for (; i < n; ++i) acc = combine(acc, {p[i], p[i] != p[i]});
    return acc;
  }
  Acc combine(Acc a, Acc b) const { return {pick(a.value, b.value), a.nan || b.nan}; }
  void fold_row(Acc* acc, const T* row, int64_t n) const {
    for (int64_t i = 0; i < n; ++i) acc[i] = combine(acc[i], {row[i], row[i] != row[i]});
  }
  T finish(Acc a, int64_t) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (a.nan) return std::numeric_limits<T>::quiet_NaN();
    }
    return a.value;
  }
};

const std::vector<int64_t>& dims_attr(const KernelContext& ctx) { return ctx.attrs.get<std::vector<int64_t>>("dims"); }

void sum_kernel(KernelContext& ctx) {
  FLOW_DISPATCH_NUMERIC(ctx.inputs[0].dtype(), "sum", [&]<typename T>() {
    using Acc = std::conditional_t<std::is_floating_point_v<T>, T, int64_t>;
    reduce<T, T>(ctx.inputs[0], ctx.outputs[0], dims_attr(ctx), SumReducer<T, Acc>());
  });
}

// bfloat16 sums accumulate in float32 and round once, reading the input where it lies: what the
// widened float32 kernel computes (same fold order, same bits) without a float32 copy of the
// input, which cost an AMP step most of its bias gradients' time (sums over whole activations).
void sum_bf16_kernel(KernelContext& ctx) {
  reduce<BFloat16, BFloat16>(ctx.inputs[0], ctx.outputs[0], dims_attr(ctx), SumReducer<BFloat16, float>());
}

void prod_kernel(KernelContext& ctx) {
  FLOW_DISPATCH_NUMERIC(ctx.inputs[0].dtype(), "prod", [&]<typename T>() {
    using Acc = std::conditional_t<std::is_floating_point_v<T>, T, int64_t>;
    reduce<T, T>(ctx.inputs[0], ctx.outputs[0], dims_attr(ctx), ProdReducer<T, Acc>());
  });
}

template <bool is_max>
void extremum_kernel(KernelContext& ctx) {
  FLOW_DISPATCH_NUMERIC(ctx.inputs[0].dtype(), is_max ? "max" : "min", [&]<typename T>() {
    reduce<T, T>(ctx.inputs[0], ctx.outputs[0], dims_attr(ctx), ExtremumReducer<T, is_max>());
  });
}

// Values and first indices of the max/min along one dim; NaN counts as the extremum.
template <bool is_max>
void arg_kernel(KernelContext& ctx) {
  const Tensor& input = ctx.inputs[0];
  const int64_t dim = ctx.attrs.get<int64_t>("dim");
  const bool with_values = ctx.outputs.size() == 2;
  Tensor& indices = ctx.outputs[with_values ? 1 : 0];
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= input.size(d);
  for (int64_t d = dim + 1; d < input.dim(); ++d) inner *= input.size(d);
  const int64_t n = input.dim() == 0 ? 1 : input.size(dim);
  FLOW_DISPATCH_NUMERIC(input.dtype(), is_max ? "argmax" : "argmin", [&]<typename T>() {
    const T* in = static_cast<const T*>(input.data_ptr());
    int64_t* idx = static_cast<int64_t*>(indices.data_ptr());
    T* values = with_values ? static_cast<T*>(ctx.outputs[0].data_ptr()) : nullptr;
    parallel_for(0, outer * inner, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(n, 1)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t o = begin; o < end; ++o) {
                     const T* p = in + (o / inner) * n * inner + o % inner;
                     int64_t best = 0;
                     T best_value = p[0];
                     for (int64_t i = 1; i < n && best_value == best_value; ++i) {
                       const T v = p[i * inner];
                       const bool better = is_max ? v > best_value : v < best_value;
                       if (better || v != v) {
                         best = i;
                         best_value = v;
                       }
                     }
                     idx[o] = best;
                     if (values) values[o] = best_value;
                   }
                 });
  });
}

const std::vector<DType> kNumeric = numeric_dtypes();
FLOW_REGISTER_KERNEL("reduce_sum", DeviceType::kCPU, kNumeric, sum_kernel);
FLOW_REGISTER_KERNEL("reduce_sum", DeviceType::kCPU, {kBFloat16}, sum_bf16_kernel);
FLOW_REGISTER_KERNEL("reduce_prod", DeviceType::kCPU, kNumeric, prod_kernel);
FLOW_REGISTER_KERNEL("reduce_max", DeviceType::kCPU, kNumeric, extremum_kernel<true>);
FLOW_REGISTER_KERNEL("reduce_min", DeviceType::kCPU, kNumeric, extremum_kernel<false>);
FLOW_REGISTER_KERNEL("argmax", DeviceType::kCPU, kNumeric, arg_kernel<true>);
FLOW_REGISTER_KERNEL("argmin", DeviceType::kCPU, kNumeric, arg_kernel<false>);
FLOW_REGISTER_KERNEL("max_dim", DeviceType::kCPU, kNumeric, arg_kernel<true>);
FLOW_REGISTER_KERNEL("min_dim", DeviceType::kCPU, kNumeric, arg_kernel<false>);

}  // namespace
}  // namespace flow::cpu
