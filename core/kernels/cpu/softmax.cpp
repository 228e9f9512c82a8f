// CPU kernels of softmax/log_softmax: per (outer, inner) slice along the dim, max-shifted, in three
// passes (max, sum of exp, normalise). The sum of exps is blocked: 16 float lanes over blocks of
// 1024 elements, each block's total added in double. A float32 running sum over a long row (a
// 50257-word vocabulary) loses about 1e-5 relative, 10x what PyTorch's cascade sum loses; the
// blocks keep float's speed (the lanes vectorise, exp included: math::exp) with the error of
// 64-term sums. The gradient kernels (softmax_grad, log_softmax_grad) sum the same way.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "core/kernels/cpu/elementwise_math.h"
#include "core/op.h"
#include "core/thread_pool.h"

namespace flow::cpu {
namespace {

constexpr int64_t kLanes = 16;
constexpr int64_t kBlock = 1024;

// The sum of term(0..n) in T's lanes over blocks, block totals in double (term inlines and the
// lane loop vectorises).
template <typename T, typename Term>
double blocked_sum(int64_t n, Term term) {
  double total = 0;
  std::array<T, kLanes> lanes;
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t stop = std::min(n, start + kBlock);
    lanes.fill(T(0));
    int64_t j = start;
    for (; j + kLanes <= stop; j += kLanes) {
      for (int64_t l = 0; l < kLanes; ++l) lanes[l] += term(j + l);
    }
    for (; j < stop; ++j) lanes[0] += term(j);
    for (const T lane : lanes) total += static_cast<double>(lane);
  }
  return total;
}

// A contiguous row: x[0..n) in, y[0..n) out.
template <bool log_output, typename T>
void contiguous_row(const T* x, T* y, int64_t n) {
  std::array<T, kLanes> lanes;
  lanes.fill(-std::numeric_limits<T>::infinity());
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] = std::max(lanes[l], x[i + l]);
  }
  T max_value = *std::max_element(lanes.begin(), lanes.end());
  for (; i < n; ++i) max_value = std::max(max_value, x[i]);
  if (std::isinf(max_value)) max_value = 0;  // all -inf: keep exp finite (gives nan like PyTorch)
  double total;
  if constexpr (log_output) {
    total = blocked_sum<T>(n, [&](int64_t j) { return math::exp(x[j] - max_value); });
  } else {
    for (int64_t j = 0; j < n; ++j) y[j] = math::exp(x[j] - max_value);
    total = blocked_sum<T>(n, [&](int64_t j) { return y[j]; });
  }
  if constexpr (log_output) {
    // (x - max) first: exact for the large entries, where folding max into the log would round.
    const auto log_total = static_cast<T>(std::log(total));
    for (int64_t k = 0; k < n; ++k) y[k] = (x[k] - max_value) - log_total;
  } else {
    const auto scale = static_cast<T>(1.0 / total);
    for (int64_t k = 0; k < n; ++k) y[k] *= scale;
  }
}

// A row with elements `inner` apart (softmax over a dim that is not the last).
template <bool log_output, typename T>
void strided_row(const T* x, T* y, int64_t n, int64_t inner) {
  T max_value = -std::numeric_limits<T>::infinity();
  for (int64_t i = 0; i < n; ++i) max_value = std::max(max_value, x[i * inner]);
  if (std::isinf(max_value)) max_value = 0;
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const T e = math::exp(x[i * inner] - max_value);
    total += static_cast<double>(e);
    if constexpr (!log_output) y[i * inner] = e;
  }
  if constexpr (log_output) {
    const auto log_total = static_cast<T>(std::log(total));
    for (int64_t i = 0; i < n; ++i) y[i * inner] = (x[i * inner] - max_value) - log_total;
  } else {
    const auto scale = static_cast<T>(1.0 / total);
    for (int64_t i = 0; i < n; ++i) y[i * inner] *= scale;
  }
}

// Calls row(base, n, inner) for each slice of t along dim (n elements, inner apart, from element
// base), the slices split over the thread pool.
template <typename Row>
void for_each_row(const Tensor& t, int64_t dim, Row row) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= t.size(d);
  for (int64_t d = dim + 1; d < t.dim(); ++d) inner *= t.size(d);
  const int64_t n = t.dim() == 0 ? 1 : t.size(dim);
  parallel_for(0, outer * inner, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(n, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) row((s / inner) * n * inner + s % inner, n, inner);
  });
}

template <bool log_output>
void softmax_kernel(KernelContext& ctx) {
  const Tensor& input = ctx.inputs[0];
  FLOW_DISPATCH_FLOATING(input.dtype(), log_output ? "log_softmax" : "softmax", [&]<typename T>() {
    const T* in = static_cast<const T*>(input.data_ptr());
    T* out = static_cast<T*>(ctx.outputs[0].data_ptr());
    for_each_row(input, ctx.attrs.get<int64_t>("dim"), [&](int64_t base, int64_t n, int64_t inner) {
      if (inner == 1) contiguous_row<log_output>(in + base, out + base, n);
      else strided_row<log_output>(in + base, out + base, n, inner);
    });
  });
}

// Per row, with g the output's gradient and y the output: softmax's input gradient is
// y (g - sum(g y)), log_softmax's g - exp(y) sum(g).
template <bool log_output>
void softmax_grad_kernel(KernelContext& ctx) {
  const Tensor& out = ctx.inputs[1];
  FLOW_DISPATCH_FLOATING(out.dtype(), log_output ? "log_softmax_grad" : "softmax_grad", [&]<typename T>() {
    const T* grad = static_cast<const T*>(ctx.inputs[0].data_ptr());
    const T* y_all = static_cast<const T*>(out.data_ptr());
    T* result = static_cast<T*>(ctx.outputs[0].data_ptr());
    for_each_row(out, ctx.attrs.get<int64_t>("dim"), [&](int64_t base, int64_t n, int64_t inner) {
      const T *g = grad + base, *y = y_all + base;
      T* r = result + base;
      if (inner == 1) {
        if constexpr (log_output) {
          const auto total = static_cast<T>(blocked_sum<T>(n, [&](int64_t i) { return g[i]; }));
          for (int64_t i = 0; i < n; ++i) r[i] = g[i] - math::exp(y[i]) * total;
        } else {
          const auto total = static_cast<T>(blocked_sum<T>(n, [&](int64_t i) { return g[i] * y[i]; }));
          for (int64_t i = 0; i < n; ++i) r[i] = y[i] * (g[i] - total);
        }
        return;
      }
      double total = 0;
      for (int64_t i = 0; i < n; ++i) total += static_cast<double>(log_output ? g[i * inner] : g[i * inner] * y[i * inner]);
      const auto sum = static_cast<T>(total);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t k = i * inner;
        r[k] = log_output ? g[k] - math::exp(y[k]) * sum : y[k] * (g[k] - sum);
      }
    });
  });
}

FLOW_REGISTER_KERNEL("softmax", DeviceType::kCPU, floating_dtypes(), softmax_kernel<false>);
FLOW_REGISTER_KERNEL("softmax_grad", DeviceType::kCPU, floating_dtypes(), softmax_grad_kernel<false>);
FLOW_REGISTER_KERNEL("log_softmax_grad", DeviceType::kCPU, floating_dtypes(), softmax_grad_kernel<true>);
FLOW_REGISTER_KERNEL("log_softmax", DeviceType::kCPU, floating_dtypes(), softmax_kernel<true>);

}  // namespace
}  // namespace flow::cpu
