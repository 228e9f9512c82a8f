// CPU kernels of softmax/log_softmax: per (outer, inner) slice along the dim, max-shifted, in three
// passes (max, sum of exp, normalise). The sum of exps is blocked: 16 float lanes over blocks of
// 1024 elements, each block's total added in double. A float32 running sum over a long row (a
// 50257-word vocabulary) loses about 1e-5 relative, 10x what PyTorch's cascade sum loses; the
// blocks keep float's speed (the lanes vectorise, exp included: math::exp) with the error of
// 64-term sums. The gradient kernels (softmax_grad, log_softmax_grad) sum the same way.
// float16/bfloat16 rows are read and written in place of float32 ones (Compute below), also with
// a float32 output from a 16-bit input (the ops' "dtype", autocast's choice) and, in the gradients,
// the reverse. The sparse softmax cross-entropy and its gradient read rows the same way.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include "core/kernels/cpu/dnnl_util.h"
#include "core/kernels/cpu/elementwise_math.h"
#include "core/kernels/cpu/softmax_rows.h"
#include "core/op.h"
#include "core/thread_pool.h"

namespace flow::cpu {
namespace {

constexpr int64_t kLanes = kSoftmaxLanes;

// The sum of term(0..n) in T's lanes over blocks, block totals in double (term inlines and the
// lane loop vectorises); softmax_rows.h says which lane each term goes to.
template <typename T, typename Term>
double blocked_sum(int64_t n, Term term) {
  double total = 0;
  std::array<T, kLanes> lanes;
  for (int64_t start = 0; start < n; start += kSoftmaxBlock) {
    const int64_t stop = std::min(n, start + kSoftmaxBlock);
    lanes.fill(T(0));
    int64_t j = start;
    for (; j + kLanes <= stop; j += kLanes) {
      for (int64_t l = 0; l < kLanes; ++l) lanes[l] += term(j + l);
    }
    for (int64_t l = 0; j + l < stop; ++l) lanes[l] += term(j + l);
    for (const T lane : lanes) total += static_cast<double>(lane);
  }
  return total;
}

// Elements compute in float (double for float64): a float16/bfloat16 element is widened as it is
// read (exactly) and a 16-bit output rounded once as it is written, so each result equals the
// float32 kernel's on the widened input, rounded, and no float32 copy of a row is made.
template <typename T>
using Compute = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
[[gnu::always_inline]] inline Compute<T> wide(T x) {
  return static_cast<Compute<T>>(x);
}

// The largest element of a contiguous row, 0 when it is infinite (all -inf: keeps exp finite,
// which gives nan like PyTorch).
template <typename In>
Compute<In> row_max(const In* x, int64_t n) {
  using C = Compute<In>;
  std::array<C, kLanes> lanes;
  lanes.fill(-std::numeric_limits<C>::infinity());
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] = std::max(lanes[l], wide(x[i + l]));
  }
  C max_value = *std::max_element(lanes.begin(), lanes.end());
  for (; i < n; ++i) max_value = std::max(max_value, wide(x[i]));
  return std::isinf(max_value) ? C(0) : max_value;
}

// log of the sum of exp(x - max_value) over a contiguous row.
template <typename In>
Compute<In> log_sum_exp_shifted(const In* x, int64_t n, Compute<In> max_value) {
  using C = Compute<In>;
  return static_cast<C>(std::log(blocked_sum<C>(n, [&](int64_t j) { return math::exp(wide(x[j]) - max_value); })));
}

// A contiguous row: x[0..n) in, y[0..n) out.
template <bool log_output, typename In, typename Out>
void contiguous_row(const In* x, Out* y, int64_t n) {
  using C = Compute<In>;
  const C max_value = row_max(x, n);
  if constexpr (log_output) {
    // (x - max) first: exact for the large entries, where folding max into the log would round.
    const C log_total = log_sum_exp_shifted(x, n, max_value);
    for (int64_t k = 0; k < n; ++k) y[k] = static_cast<Out>((wide(x[k]) - max_value) - log_total);
  } else if constexpr (std::is_same_v<Out, C>) {
    for (int64_t j = 0; j < n; ++j) y[j] = math::exp(wide(x[j]) - max_value);
    const auto scale = static_cast<C>(1.0 / blocked_sum<C>(n, [&](int64_t j) { return y[j]; }));
    for (int64_t k = 0; k < n; ++k) y[k] *= scale;
  } else {
    // A 16-bit output cannot hold the exps until the sum is known: they are computed again.
    const auto scale = static_cast<C>(1.0 / blocked_sum<C>(n, [&](int64_t j) { return math::exp(wide(x[j]) - max_value); }));
    for (int64_t k = 0; k < n; ++k) y[k] = static_cast<Out>(math::exp(wide(x[k]) - max_value) * scale);
  }
}

// A row with elements `inner` apart (softmax over a dim that is not the last).
template <bool log_output, typename In, typename Out>
void strided_row(const In* x, Out* y, int64_t n, int64_t inner) {
  using C = Compute<In>;
  C max_value = -std::numeric_limits<C>::infinity();
  for (int64_t i = 0; i < n; ++i) max_value = std::max(max_value, wide(x[i * inner]));
  if (std::isinf(max_value)) max_value = 0;
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += static_cast<double>(math::exp(wide(x[i * inner]) - max_value));
  if constexpr (log_output) {
    const auto log_total = static_cast<C>(std::log(total));
    for (int64_t i = 0; i < n; ++i) y[i * inner] = static_cast<Out>((wide(x[i * inner]) - max_value) - log_total);
  } else {
    const auto scale = static_cast<C>(1.0 / total);
    for (int64_t i = 0; i < n; ++i) y[i * inner] = static_cast<Out>(math::exp(wide(x[i * inner]) - max_value) * scale);
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

// Calls f.template operator()<In, Out>() for the dtypes of a kernel's input and output: the same
// floating dtype, or a float16/bfloat16 input with a float32 output and the reverse.
template <typename F>
void dispatch_in_out(const char* op, DType in, DType out, F f) {
  if (in == kFloat32 && out == kFloat32) return f.template operator()<float, float>();
  if (in == kFloat64 && out == kFloat64) return f.template operator()<double, double>();
  if (in == kBFloat16 && out == kBFloat16) return f.template operator()<BFloat16, BFloat16>();
  if (in == kFloat16 && out == kFloat16) return f.template operator()<Half, Half>();
  if (in == kBFloat16 && out == kFloat32) return f.template operator()<BFloat16, float>();
  if (in == kFloat16 && out == kFloat32) return f.template operator()<Half, float>();
  if (in == kFloat32 && out == kBFloat16) return f.template operator()<float, BFloat16>();
  if (in == kFloat32 && out == kFloat16) return f.template operator()<float, Half>();
  fail(op, "no CPU kernel from ", dtype_name(in), " to ", dtype_name(out));
}

// Whether softmax_rows.h has AVX-512 rows for these dtypes (float and bfloat16, no float16 output).
template <typename A, typename B>
inline constexpr bool kAvx512Rows = (std::is_same_v<A, float> || std::is_same_v<A, BFloat16>) && (std::is_same_v<B, float> || std::is_same_v<B, BFloat16>);

template <bool log_output>
void softmax_kernel(KernelContext& ctx) {
  const Tensor& input = ctx.inputs[0];
  const char* name = log_output ? "log_softmax" : "softmax";
  const bool avx512 = dnnl_util::has_avx512_core();
  dispatch_in_out(name, input.dtype(), ctx.outputs[0].dtype(), [&]<typename In, typename Out>() {
    const In* in = static_cast<const In*>(input.data_ptr());
    Out* out = static_cast<Out*>(ctx.outputs[0].data_ptr());
    for_each_row(input, ctx.attrs.get<int64_t>("dim"), [&](int64_t base, int64_t n, int64_t inner) {
      if (inner != 1) return strided_row<log_output>(in + base, out + base, n, inner);
      if constexpr (kAvx512Rows<In, Out>) {
        if (avx512) return avx512::softmax_row<log_output>(in + base, out + base, n);
      }
      contiguous_row<log_output>(in + base, out + base, n);
    });
  });
}

// Per row, with g the output's gradient and y the output: softmax's input gradient is
// y (g - sum(g y)), log_softmax's g - exp(y) sum(g). Written in the output's dtype R (the
// forward input's: 16-bit where the forward widened).
template <bool log_output>
void softmax_grad_kernel(KernelContext& ctx) {
  const Tensor& out = ctx.inputs[1];
  const char* name = log_output ? "log_softmax_grad" : "softmax_grad";
  const bool avx512 = dnnl_util::has_avx512_core();
  dispatch_in_out(name, out.dtype(), ctx.outputs[0].dtype(), [&]<typename T, typename R>() {
    using C = Compute<T>;
    const T* grad = static_cast<const T*>(ctx.inputs[0].data_ptr());
    const T* y_all = static_cast<const T*>(out.data_ptr());
    R* result = static_cast<R*>(ctx.outputs[0].data_ptr());
    for_each_row(out, ctx.attrs.get<int64_t>("dim"), [&](int64_t base, int64_t n, int64_t inner) {
      const T *g = grad + base, *y = y_all + base;
      R* r = result + base;
      if constexpr (kAvx512Rows<T, R>) {
        if (avx512 && inner == 1) return avx512::softmax_grad_row<log_output>(g, y, r, n);
      }
      if (inner == 1) {
        if constexpr (log_output) {
          const auto total = static_cast<C>(blocked_sum<C>(n, [&](int64_t i) { return wide(g[i]); }));
          for (int64_t i = 0; i < n; ++i) r[i] = static_cast<R>(wide(g[i]) - math::exp(wide(y[i])) * total);
        } else {
          const auto total = static_cast<C>(blocked_sum<C>(n, [&](int64_t i) { return wide(g[i]) * wide(y[i]); }));
          for (int64_t i = 0; i < n; ++i) r[i] = static_cast<R>(wide(y[i]) * (wide(g[i]) - total));
        }
        return;
      }
      double total = 0;
      for (int64_t i = 0; i < n; ++i) {
        total += static_cast<double>(log_output ? wide(g[i * inner]) : wide(g[i * inner]) * wide(y[i * inner]));
      }
      const auto sum = static_cast<C>(total);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t k = i * inner;
        const C gk = wide(g[k]), yk = wide(y[k]);
        r[k] = static_cast<R>(log_output ? gk - math::exp(yk) * sum : yk * (gk - sum));
      }
    });
  });
}

// Sparse softmax cross-entropy (core/ops/softmax.cpp): per row of logits (N, C), log_softmax's
// statistics as contiguous_row computes them and loss = -((x[label] - max) - log_sum_exp), the
// float operations of log_softmax + gather, so the losses are those bits.
void check_labels(const char* name, const Tensor& labels, int64_t classes, int64_t ignore_index) {
  const int64_t* label = labels.data_ptr<int64_t>();
  for (int64_t n = 0; n < labels.numel(); ++n) {
    if (label[n] != ignore_index && (label[n] < 0 || label[n] >= classes)) {
      fail(name, "label ", label[n], " of row ", n, " is outside [0, ", classes, ") and is not ignore_index (", ignore_index, ")");
    }
  }
}

// log_softmax's statistics of a contiguous row (max, log of the sum of exp(x - max)): the AVX-512
// row where the CPU has it, else the portable loops; the same bits either way.
template <typename In>
std::pair<Compute<In>, Compute<In>> log_softmax_statistics(const In* x, int64_t n, bool avx512) {
  if constexpr (kAvx512Rows<In, In>) {
    if (avx512) {
      float max_value = 0, log_total = 0;
      avx512::log_sum_exp_row(x, n, &max_value, &log_total);
      return {max_value, log_total};
    }
  }
  const Compute<In> max_value = row_max(x, n);
  return {max_value, log_sum_exp_shifted(x, n, max_value)};
}

// Rows of `classes` elements split over the thread pool.
template <typename Row>
void for_each_logits_row(int64_t rows, int64_t classes, Row row) {
  parallel_for(0, rows, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(classes, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) row(n);
  });
}

void sparse_cross_entropy_kernel(KernelContext& ctx) {
  constexpr const char* kName = "sparse_softmax_cross_entropy";
  const Tensor& logits = ctx.inputs[0];
  const int64_t classes = logits.size(1), ignore_index = ctx.attrs.get<int64_t>("ignore_index");
  check_labels(kName, ctx.inputs[1], classes, ignore_index);
  const int64_t* labels = ctx.inputs[1].data_ptr<int64_t>();
  const bool avx512 = dnnl_util::has_avx512_core();
  dispatch_in_out(kName, logits.dtype(), ctx.outputs[0].dtype(), [&]<typename In, typename Out>() {
    using C = Compute<In>;
    const In* x_all = static_cast<const In*>(logits.data_ptr());
    Out* loss = static_cast<Out*>(ctx.outputs[0].data_ptr());
    C* max_out = static_cast<C*>(ctx.outputs[1].data_ptr());
    C* log_total_out = static_cast<C*>(ctx.outputs[2].data_ptr());
    for_each_logits_row(logits.size(0), classes, [&](int64_t n) {
      const In* x = x_all + n * classes;
      const auto [max_value, log_total] = log_softmax_statistics(x, classes, avx512);
      max_out[n] = max_value;
      log_total_out[n] = log_total;
      loss[n] = labels[n] == ignore_index ? Out(0) : static_cast<Out>(-((wide(x[labels[n]]) - max_value) - log_total));
    });
  });
}

// grad_logits = (softmax - one_hot(label)) * grad[n] per row, zero on ignored rows: with s = grad[n]
// and y = (x - max) - log_sum_exp, exp(y) s, and at the label -s - exp(y) (-s), log_softmax_grad's
// operations on the one-hot gradient gather_grad made.
void sparse_cross_entropy_grad_kernel(KernelContext& ctx) {
  constexpr const char* kName = "sparse_softmax_cross_entropy_grad";
  const Tensor& logits = ctx.inputs[1];
  const int64_t classes = logits.size(1), ignore_index = ctx.attrs.get<int64_t>("ignore_index");
  check_labels(kName, ctx.inputs[2], classes, ignore_index);
  const int64_t* labels = ctx.inputs[2].data_ptr<int64_t>();
  const bool avx512 = dnnl_util::has_avx512_core();
  dispatch_in_out(kName, logits.dtype(), ctx.inputs[0].dtype(), [&]<typename In, typename G>() {
    using C = Compute<In>;
    const In* x_all = static_cast<const In*>(logits.data_ptr());
    const G* grad = static_cast<const G*>(ctx.inputs[0].data_ptr());
    const C* max_all = static_cast<const C*>(ctx.inputs[3].data_ptr());
    const C* log_total_all = static_cast<const C*>(ctx.inputs[4].data_ptr());
    In* result = static_cast<In*>(ctx.outputs[0].data_ptr());
    for_each_logits_row(logits.size(0), classes, [&](int64_t n) {
      const In* x = x_all + n * classes;
      In* r = result + n * classes;
      if (labels[n] == ignore_index) {
        std::fill(r, r + classes, In(0));
        return;
      }
      const C s = static_cast<C>(wide(grad[n])), max_value = max_all[n], log_total = log_total_all[n];
      const auto softmax_scaled = [&] {
        if constexpr (kAvx512Rows<In, In>) {
          if (avx512) return avx512::cross_entropy_grad_row(x, max_value, log_total, s, r, classes);
        }
        for (int64_t i = 0; i < classes; ++i) r[i] = static_cast<In>(math::exp((wide(x[i]) - max_value) - log_total) * s);
      };
      softmax_scaled();
      const C label_log_probability = (wide(x[labels[n]]) - max_value) - log_total;
      r[labels[n]] = static_cast<In>(-s - math::exp(label_log_probability) * (-s));
    });
  });
}

const std::vector<DType> kDtypes{kFloat32, kFloat64, kBFloat16, kFloat16};

FLOW_REGISTER_KERNEL("softmax", DeviceType::kCPU, kDtypes, softmax_kernel<false>);
FLOW_REGISTER_KERNEL("softmax_grad", DeviceType::kCPU, kDtypes, softmax_grad_kernel<false>);
FLOW_REGISTER_KERNEL("log_softmax_grad", DeviceType::kCPU, kDtypes, softmax_grad_kernel<true>);
FLOW_REGISTER_KERNEL("log_softmax", DeviceType::kCPU, kDtypes, softmax_kernel<true>);
FLOW_REGISTER_KERNEL("sparse_softmax_cross_entropy", DeviceType::kCPU, kDtypes, sparse_cross_entropy_kernel);
FLOW_REGISTER_KERNEL("sparse_softmax_cross_entropy_grad", DeviceType::kCPU, kDtypes, sparse_cross_entropy_grad_kernel);

}  // namespace
}  // namespace flow::cpu
