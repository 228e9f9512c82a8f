// Layer normalization kernels over the input viewed as (rows, features): float32 through oneDNN's
// layer normalization primitives (cached per shape and eps) except a small forward, which is a
// plain loop; float64 as plain loops with sums in double (the reference the oneDNN kernels are
// tested against). oneDNN keeps the biased variance
// where flow's op carries rstd = 1 / sqrt(var + eps), so the float32 kernels convert per row.
#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>

#include "core/kernels/cpu/dnnl_util.h"
#include "core/op.h"
#include "core/thread_pool.h"

namespace flow::cpu {
namespace {

using namespace dnnl_util;
using dnnl::normalization_flags;

struct Layout {
  int64_t rows, features;
};

Layout layout_of(const Shape& shape, int64_t normalized_ndim) {
  int64_t features = 1;
  for (int64_t d = shape.ndim() - normalized_ndim; d < shape.ndim(); ++d) features *= shape[d];
  return {features == 0 ? 0 : shape.numel() / features, features};
}

// ---- float64 loops ----

// The sum of term(f) for f in [0, n): float in 8 independent lanes that the compiler vectorises,
// double one term after another (the reference the float32 kernels are tested against).
template <typename T, typename Term>
T row_sum(int64_t n, Term term) {
  T total = 0;
  int64_t f = 0;
  if constexpr (std::is_same_v<T, float>) {
    constexpr int64_t kLanes = 8;
    T lanes[kLanes] = {};
    for (; f + kLanes <= n; f += kLanes) {
      for (int64_t k = 0; k < kLanes; ++k) lanes[k] += term(f + k);
    }
    for (; f < n; ++f) total += term(f);
    for (T lane : lanes) total += lane;
    return total;
  }
  for (; f < n; ++f) total += term(f);
  return total;
}

// Rows [begin, end): mean, biased variance, y = (x - mean) * rstd * weight + bias, rstd =
// 1 / sqrt(var + eps) (what oneDNN computes).
template <typename T>
void forward_rows(KernelContext& ctx, const Layout& l, T eps, int64_t begin, int64_t end) {
  const bool affine = ctx.inputs.size() == 3;
  const T* x = ctx.inputs[0].data_ptr<T>();
  const T* weight = affine ? ctx.inputs[1].data_ptr<T>() : nullptr;
  const T* bias = affine ? ctx.inputs[2].data_ptr<T>() : nullptr;
  T *y = ctx.outputs[0].data_ptr<T>(), *mean_out = ctx.outputs[1].data_ptr<T>(), *rstd_out = ctx.outputs[2].data_ptr<T>();
  const auto features = static_cast<T>(l.features);
  for (int64_t r = begin; r < end; ++r) {
    const T* row = x + r * l.features;
    T* out = y + r * l.features;
    const T mean = row_sum<T>(l.features, [&](int64_t f) { return row[f]; }) / features;
    const T rstd = T(1) / std::sqrt(row_sum<T>(l.features, [&](int64_t f) { return (row[f] - mean) * (row[f] - mean); }) / features + eps);
    mean_out[r] = mean;
    rstd_out[r] = rstd;
    if (affine) {
      for (int64_t f = 0; f < l.features; ++f) out[f] = (row[f] - mean) * rstd * weight[f] + bias[f];
    } else {
      for (int64_t f = 0; f < l.features; ++f) out[f] = (row[f] - mean) * rstd;
    }
  }
}

void forward_loops(KernelContext& ctx) {
  const Layout l = layout_of(ctx.inputs[0].shape(), ctx.attrs.get<int64_t>("normalized_ndim"));
  parallel_for(0, l.rows, 1, [&](int64_t begin, int64_t end) { forward_rows<double>(ctx, l, ctx.attrs.get<double>("eps"), begin, end); });
}

// inputs: grad_out, input, mean, rstd[, weight]. Per row, with g = dy * weight and
// xhat = (x - mean) * rstd: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
void backward_loops(KernelContext& ctx) {
  const Layout l = layout_of(ctx.inputs[1].shape(), ctx.attrs.get<int64_t>("normalized_ndim"));
  const bool affine = ctx.inputs.size() == 5;
  const double *dy = ctx.inputs[0].data_ptr<double>(), *x = ctx.inputs[1].data_ptr<double>();
  const double *mean = ctx.inputs[2].data_ptr<double>(), *rstd = ctx.inputs[3].data_ptr<double>();
  const double* weight = affine ? ctx.inputs[4].data_ptr<double>() : nullptr;
  double *dx = ctx.outputs[0].data_ptr<double>(), *grad_weight = ctx.outputs[1].data_ptr<double>(), *grad_bias = ctx.outputs[2].data_ptr<double>();
  const double n = static_cast<double>(l.features);
  parallel_for(0, l.rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t base = r * l.features;
      double sum_g = 0, sum_g_xhat = 0;
      for (int64_t f = 0; f < l.features; ++f) {
        const double g = dy[base + f] * (affine ? weight[f] : 1.0);
        sum_g += g;
        sum_g_xhat += g * (x[base + f] - mean[r]) * rstd[r];
      }
      for (int64_t f = 0; f < l.features; ++f) {
        const double g = dy[base + f] * (affine ? weight[f] : 1.0), xhat = (x[base + f] - mean[r]) * rstd[r];
        dx[base + f] = rstd[r] * (g - sum_g / n - xhat * sum_g_xhat / n);
      }
    }
  });
  // Weight and bias gradients sum over rows: split over features instead.
  parallel_for(0, l.features, 1, [&](int64_t begin, int64_t end) {
    for (int64_t f = begin; f < end; ++f) {
      double sum_dy = 0, sum_dy_xhat = 0;
      for (int64_t r = 0; r < l.rows; ++r) {
        sum_dy += dy[r * l.features + f];
        sum_dy_xhat += dy[r * l.features + f] * (x[r * l.features + f] - mean[r]) * rstd[r];
      }
      grad_bias[f] = sum_dy;
      grad_weight[f] = sum_dy_xhat;
    }
  });
}

// ---- float32 through oneDNN ----

struct Key {
  int64_t rows, features;
  float eps;
  auto tie() const { return std::tie(rows, features, eps); }
  bool operator<(const Key& other) const { return tie() < other.tie(); }
};

struct Primitives {
  dnnl::layer_normalization_forward forward;
  dnnl::layer_normalization_backward backward;
};

std::shared_ptr<const Primitives> primitives(const Key& key) {
  return cached_primitives<Primitives>(key, [](const Key& key) {
    const normalization_flags affine = normalization_flags::use_scale | normalization_flags::use_shift;
    const memory::desc data = plain({key.rows, key.features});
    dnnl::layer_normalization_forward::desc forward(dnnl::prop_kind::forward_training, data, key.eps, affine);
    const dnnl::layer_normalization_forward::primitive_desc forward_pd(forward, user_scratchpad(), engine());
    dnnl::layer_normalization_backward::desc backward(dnnl::prop_kind::backward, data, data, key.eps, affine);
    const dnnl::layer_normalization_backward::primitive_desc backward_pd(backward, user_scratchpad(), engine(), forward_pd);
    return Primitives{dnnl::layer_normalization_forward(forward_pd), dnnl::layer_normalization_backward(backward_pd)};
  });
}

// A (features) vector: the given tensor's data, or `fill` where the op has no such input.
memory feature_memory(const Layout& l, const Tensor* given, std::vector<float>& storage, float fill) {
  if (given) return memory(plain({l.features}), engine(), given->data_ptr());
  storage.assign(static_cast<size_t>(l.features), fill);
  return memory(plain({l.features}), engine(), storage.data());
}

// Up to this many elements the float32 forward is a plain loop: oneDNN's fixed cost per call
// (primitive cache lookup, memory objects, a stream) is more than a decode step's 8 x 256 rows take.
constexpr int64_t kLoopLayerNormElements = 32768;

void forward_float32(KernelContext& ctx) {
  const Layout l = layout_of(ctx.inputs[0].shape(), ctx.attrs.get<int64_t>("normalized_ndim"));
  if (l.rows == 0 || l.features == 0) return;
  const Key key{l.rows, l.features, static_cast<float>(ctx.attrs.get<double>("eps"))};
  if (l.rows * l.features <= kLoopLayerNormElements) return forward_rows<float>(ctx, l, key.eps, 0, l.rows);
  const bool affine = ctx.inputs.size() == 3;
  std::vector<float> ones, zeros, variance(static_cast<size_t>(l.rows));
  const ThreadCapScope cap(elementwise_threads(l.rows * l.features));
  const auto cached = primitives(key);  // held until the run ends: another thread may evict it
  dnnl::stream stream = stream_for_call();
  run_primitive(cached->forward, stream, {{DNNL_ARG_SRC, memory(plain({l.rows, l.features}), engine(), ctx.inputs[0].data_ptr())},
                                         {DNNL_ARG_SCALE, feature_memory(l, affine ? &ctx.inputs[1] : nullptr, ones, 1.0f)},
                                         {DNNL_ARG_SHIFT, feature_memory(l, affine ? &ctx.inputs[2] : nullptr, zeros, 0.0f)},
                                         {DNNL_ARG_DST, memory(plain({l.rows, l.features}), engine(), ctx.outputs[0].data_ptr())},
                                         {DNNL_ARG_MEAN, memory(plain({l.rows}), engine(), ctx.outputs[1].data_ptr())},
                                         {DNNL_ARG_VARIANCE, memory(plain({l.rows}), engine(), variance.data())}});
  stream.wait();
  float* rstd = ctx.outputs[2].data_ptr<float>();
  for (int64_t r = 0; r < l.rows; ++r) rstd[r] = 1.0f / std::sqrt(variance[r] + key.eps);
}

void backward_dnnl(KernelContext& ctx) {
  const Layout l = layout_of(ctx.inputs[1].shape(), ctx.attrs.get<int64_t>("normalized_ndim"));
  if (l.rows == 0 || l.features == 0) {
    for (size_t o = 1; o < 3; ++o) std::fill_n(ctx.outputs[o].data_ptr<float>(), ctx.outputs[o].numel(), 0.0f);
    return;
  }
  const Key key{l.rows, l.features, static_cast<float>(ctx.attrs.get<double>("eps"))};
  const bool affine = ctx.inputs.size() == 5;
  const float* rstd = ctx.inputs[3].data_ptr<float>();
  // The biased variance the forward saw (oneDNN adds eps back).
  std::vector<float> variance(static_cast<size_t>(l.rows)), ones, zeros;
  for (int64_t r = 0; r < l.rows; ++r) variance[r] = static_cast<float>(1.0 / (static_cast<double>(rstd[r]) * rstd[r]) - static_cast<double>(key.eps));
  const ThreadCapScope cap(elementwise_threads(l.rows * l.features));
  const auto cached = primitives(key);  // held until the run ends: another thread may evict it
  dnnl::stream stream = stream_for_call();
  run_primitive(cached->backward, stream, {{DNNL_ARG_SRC, memory(plain({l.rows, l.features}), engine(), ctx.inputs[1].data_ptr())},
                                          {DNNL_ARG_MEAN, memory(plain({l.rows}), engine(), ctx.inputs[2].data_ptr())},
                                          {DNNL_ARG_VARIANCE, memory(plain({l.rows}), engine(), variance.data())},
                                          {DNNL_ARG_DIFF_DST, memory(plain({l.rows, l.features}), engine(), ctx.inputs[0].data_ptr())},
                                          {DNNL_ARG_SCALE, feature_memory(l, affine ? &ctx.inputs[4] : nullptr, ones, 1.0f)},
                                          // Unused by the gradient, but oneDNN 2.6 wants it with use_shift.
                                          {DNNL_ARG_SHIFT, feature_memory(l, nullptr, zeros, 0.0f)},
                                          {DNNL_ARG_DIFF_SRC, memory(plain({l.rows, l.features}), engine(), ctx.outputs[0].data_ptr())},
                                          {DNNL_ARG_DIFF_SCALE, memory(plain({l.features}), engine(), ctx.outputs[1].data_ptr())},
                                          {DNNL_ARG_DIFF_SHIFT, memory(plain({l.features}), engine(), ctx.outputs[2].data_ptr())}});
  stream.wait();
}

FLOW_REGISTER_KERNEL("layer_norm", DeviceType::kCPU, {kFloat32}, forward_float32);
FLOW_REGISTER_KERNEL("layer_norm_grad", DeviceType::kCPU, {kFloat32}, backward_dnnl);
FLOW_REGISTER_KERNEL("layer_norm", DeviceType::kCPU, {kFloat64}, forward_loops);
FLOW_REGISTER_KERNEL("layer_norm_grad", DeviceType::kCPU, {kFloat64}, backward_loops);

}  // namespace
}  // namespace flow::cpu
