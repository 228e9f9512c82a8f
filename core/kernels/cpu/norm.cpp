// Batch normalization as plain loops over the input viewed as (N, C, S), S the product of the
// trailing dims: the float64 kernels, and the reference the float32 oneDNN kernels
// (norm_dnnl.cpp) are tested against. Channels are split over the thread pool; sums accumulate
// in double.
#include <cmath>

#include "core/kernels/cpu/norm_layout.h"
#include "core/thread_pool.h"

namespace flow::cpu {
namespace {

// Calls fn(offset of the run, run length) for each contiguous run of channel c.
template <typename Fn>
void for_each_run(const NormLayout& l, int64_t c, Fn&& fn) {
  for (int64_t n = 0; n < l.n; ++n) fn((n * l.c + c) * l.s, l.s);
}

void eval_kernel(KernelContext& ctx) {
  const NormLayout l = norm_layout(ctx.inputs[0].shape());
  const bool affine = ctx.inputs.size() == 5;
  const double eps = ctx.attrs.get<double>("eps");
  FLOW_DISPATCH_FLOATING(ctx.inputs[0].dtype(), "batch_norm", [&]<typename T>() {
    const T* x = ctx.inputs[0].data_ptr<T>();
    const T *running_mean = ctx.inputs[1].data_ptr<T>(), *running_var = ctx.inputs[2].data_ptr<T>();
    const T* weight = affine ? ctx.inputs[3].data_ptr<T>() : nullptr;
    const T* bias = affine ? ctx.inputs[4].data_ptr<T>() : nullptr;
    T* y = ctx.outputs[0].data_ptr<T>();
    parallel_for(0, l.c, 1, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        const T invstd = T(1) / std::sqrt(running_var[c] + static_cast<T>(eps));
        const T w = affine ? weight[c] : T(1), b = affine ? bias[c] : T(0);
        for_each_run(l, c, [&](int64_t offset, int64_t length) {
          for (int64_t i = offset; i < offset + length; ++i) y[i] = (x[i] - running_mean[c]) * invstd * w + b;
        });
      }
    });
  });
}

void train_kernel(KernelContext& ctx) {
  const NormLayout l = norm_layout(ctx.inputs[0].shape());
  const bool affine = ctx.inputs.size() == 3;
  const double eps = ctx.attrs.get<double>("eps");
  FLOW_DISPATCH_FLOATING(ctx.inputs[0].dtype(), "batch_norm", [&]<typename T>() {
    const T* x = ctx.inputs[0].data_ptr<T>();
    const T* weight = affine ? ctx.inputs[1].data_ptr<T>() : nullptr;
    const T* bias = affine ? ctx.inputs[2].data_ptr<T>() : nullptr;
    T *y = ctx.outputs[0].data_ptr<T>(), *mean_out = ctx.outputs[1].data_ptr<T>(), *invstd_out = ctx.outputs[2].data_ptr<T>();
    parallel_for(0, l.c, 1, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        double total = 0, squares = 0;
        for_each_run(l, c, [&](int64_t offset, int64_t length) {
          for (int64_t i = offset; i < offset + length; ++i) total += x[i];
        });
        const double mean = total / static_cast<double>(l.count());
        for_each_run(l, c, [&](int64_t offset, int64_t length) {
          for (int64_t i = offset; i < offset + length; ++i) squares += (x[i] - mean) * (x[i] - mean);
        });
        const double invstd = 1.0 / std::sqrt(squares / static_cast<double>(l.count()) + eps);
        mean_out[c] = static_cast<T>(mean);
        invstd_out[c] = static_cast<T>(invstd);
        const double w = affine ? weight[c] : 1.0, b = affine ? bias[c] : 0.0;
        for_each_run(l, c, [&](int64_t offset, int64_t length) {
          for (int64_t i = offset; i < offset + length; ++i) y[i] = static_cast<T>((x[i] - mean) * invstd * w + b);
        });
      }
    });
  });
}

// inputs: grad_out, grad_mean, grad_invstd, input, mean, invstd[, weight]. Per channel the input
// gradient is affine in dy and x (BatchNormGradCoefficients).
void train_grad_kernel(KernelContext& ctx) {
  const Tensor& input = ctx.inputs[3];
  const NormLayout l = norm_layout(input.shape());
  const bool affine = ctx.inputs.size() == 7;
  FLOW_DISPATCH_FLOATING(input.dtype(), "batch_norm", [&]<typename T>() {
    const T *dy = ctx.inputs[0].data_ptr<T>(), *grad_mean = ctx.inputs[1].data_ptr<T>(), *grad_invstd = ctx.inputs[2].data_ptr<T>();
    const T *x = input.data_ptr<T>(), *mean = ctx.inputs[4].data_ptr<T>(), *invstd = ctx.inputs[5].data_ptr<T>();
    const T* weight = affine ? ctx.inputs[6].data_ptr<T>() : nullptr;
    T *dx = ctx.outputs[0].data_ptr<T>(), *grad_weight = ctx.outputs[1].data_ptr<T>(), *grad_bias = ctx.outputs[2].data_ptr<T>();
    parallel_for(0, l.c, 1, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        double sum_dy = 0, sum_dy_centered = 0;
        for_each_run(l, c, [&](int64_t offset, int64_t length) {
          for (int64_t i = offset; i < offset + length; ++i) {
            sum_dy += dy[i];
            sum_dy_centered += dy[i] * (x[i] - static_cast<double>(mean[c]));
          }
        });
        grad_bias[c] = static_cast<T>(sum_dy);
        grad_weight[c] = static_cast<T>(sum_dy_centered * invstd[c]);
        const BatchNormGradCoefficients k(l.count(), invstd[c], affine ? weight[c] : 1.0, sum_dy, sum_dy_centered, grad_mean[c],
                                          grad_invstd[c]);
        for_each_run(l, c, [&](int64_t offset, int64_t length) {
          for (int64_t i = offset; i < offset + length; ++i)
            dx[i] = static_cast<T>(k.dy_coef * dy[i] + k.centered_coef * (x[i] - mean[c]) + k.shift);
        });
      }
    });
  });
}

FLOW_REGISTER_KERNEL("batch_norm_eval", DeviceType::kCPU, {kFloat64}, eval_kernel);
FLOW_REGISTER_KERNEL("batch_norm_train", DeviceType::kCPU, {kFloat64}, train_kernel);
FLOW_REGISTER_KERNEL("batch_norm_train_grad", DeviceType::kCPU, {kFloat64}, train_grad_kernel);

}  // namespace
}  // namespace flow::cpu
