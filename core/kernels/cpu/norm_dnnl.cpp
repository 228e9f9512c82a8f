// float32 batch normalization through oneDNN: inference with given statistics, training forward
// and backward, over the input viewed as plain (N, C, S, 1). Primitive descriptors are cached
// per (shape, eps). Scale and shift are always passed (ones and zeros without affine), so one
// configuration serves both. oneDNN works with the biased variance where flow's ops carry
// invstd, so the kernels convert between the two per channel.
#include <cmath>

#include "core/kernels/cpu/dnnl_util.h"
#include "core/kernels/cpu/norm_layout.h"

namespace flow::cpu {
namespace {

using namespace dnnl_util;
using dnnl::normalization_flags;

struct NormKey {
  Dims dims;
  float eps;
  bool training;
  auto tie() const { return std::tie(dims, eps, training); }
  bool operator<(const NormKey& other) const { return tie() < other.tie(); }
};

struct NormPrimitives {
  dnnl::batch_normalization_forward::primitive_desc forward;
  dnnl::batch_normalization_forward forward_primitive;
  // Training only.
  dnnl::batch_normalization_backward::primitive_desc backward;
  dnnl::batch_normalization_backward backward_primitive;
};

std::shared_ptr<const NormPrimitives> primitives(const NormKey& key) {
  return cached_primitives<NormPrimitives>(key, [](const NormKey& key) {
    const normalization_flags affine = normalization_flags::use_scale | normalization_flags::use_shift;
    const memory::desc data = plain(key.dims);
    NormPrimitives p;
    if (key.training) {
      dnnl::batch_normalization_forward::desc forward(dnnl::prop_kind::forward_training, data, key.eps, affine);
      p.forward = dnnl::batch_normalization_forward::primitive_desc(forward, user_scratchpad(), engine());
      dnnl::batch_normalization_backward::desc backward(dnnl::prop_kind::backward, data, data, key.eps, affine);
      p.backward = dnnl::batch_normalization_backward::primitive_desc(backward, user_scratchpad(), engine(), p.forward);
      p.backward_primitive = dnnl::batch_normalization_backward(p.backward);
    } else {
      dnnl::batch_normalization_forward::desc forward(dnnl::prop_kind::forward_inference, data, key.eps,
                                                      affine | normalization_flags::use_global_stats);
      p.forward = dnnl::batch_normalization_forward::primitive_desc(forward, user_scratchpad(), engine());
    }
    p.forward_primitive = dnnl::batch_normalization_forward(p.forward);
    return p;
  });
}

NormKey make_key(const NormLayout& l, double eps, bool training) { return {{l.n, l.c, l.s, 1}, static_cast<float>(eps), training}; }

// A (C) vector: the given tensor's data, or `fill` where the op has no such input.
memory channel_memory(const NormLayout& l, const Tensor* given, std::vector<float>& storage, float fill) {
  if (given) return memory(plain({l.c}), engine(), given->data_ptr());
  storage.assign(static_cast<size_t>(l.c), fill);
  return memory(plain({l.c}), engine(), storage.data());
}

void eval_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  if (x.numel() == 0) return;
  const NormLayout l = norm_layout(x.shape());
  const bool affine = ctx.inputs.size() == 5;
  const NormKey key = make_key(l, ctx.attrs.get<double>("eps"), false);
  const ThreadCapScope cap(elementwise_threads(x.numel()));
  const auto cached = primitives(key);  // held while it runs: another thread may evict it
  const NormPrimitives& p = *cached;
  std::vector<float> ones, zeros;
  dnnl::stream stream = stream_for_call();
  run_primitive(p.forward_primitive, stream, {{DNNL_ARG_SRC, memory(plain(key.dims), engine(), x.data_ptr())},
                                              {DNNL_ARG_MEAN, memory(plain({l.c}), engine(), ctx.inputs[1].data_ptr())},
                                              {DNNL_ARG_VARIANCE, memory(plain({l.c}), engine(), ctx.inputs[2].data_ptr())},
                                              {DNNL_ARG_SCALE, channel_memory(l, affine ? &ctx.inputs[3] : nullptr, ones, 1.0f)},
                                              {DNNL_ARG_SHIFT, channel_memory(l, affine ? &ctx.inputs[4] : nullptr, zeros, 0.0f)},
                                              {DNNL_ARG_DST, memory(plain(key.dims), engine(), ctx.outputs[0].data_ptr())}});
  stream.wait();
}

void train_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  if (x.numel() == 0) return;
  const NormLayout l = norm_layout(x.shape());
  const bool affine = ctx.inputs.size() == 3;
  const NormKey key = make_key(l, ctx.attrs.get<double>("eps"), true);
  const ThreadCapScope cap(elementwise_threads(x.numel()));
  const auto cached = primitives(key);  // held while it runs: another thread may evict it
  const NormPrimitives& p = *cached;
  std::vector<float> ones, zeros, variance(static_cast<size_t>(l.c));
  dnnl::stream stream = stream_for_call();
  run_primitive(p.forward_primitive, stream, {{DNNL_ARG_SRC, memory(plain(key.dims), engine(), x.data_ptr())},
                                              {DNNL_ARG_SCALE, channel_memory(l, affine ? &ctx.inputs[1] : nullptr, ones, 1.0f)},
                                              {DNNL_ARG_SHIFT, channel_memory(l, affine ? &ctx.inputs[2] : nullptr, zeros, 0.0f)},
                                              {DNNL_ARG_DST, memory(plain(key.dims), engine(), ctx.outputs[0].data_ptr())},
                                              {DNNL_ARG_MEAN, memory(plain({l.c}), engine(), ctx.outputs[1].data_ptr())},
                                              {DNNL_ARG_VARIANCE, memory(plain({l.c}), engine(), variance.data())}});
  stream.wait();
  float* invstd = ctx.outputs[2].data_ptr<float>();
  for (int64_t c = 0; c < l.c; ++c) invstd[c] = 1.0f / std::sqrt(variance[c] + key.eps);
}

// Adds the input-gradient paths through the mean and invstd outputs, which oneDNN does not
// know about; they are zero unless something differentiated those outputs.
void add_statistics_paths(const NormLayout& l, const float* x, const float* mean, const float* invstd, const float* grad_mean,
                          const float* grad_invstd, float* dx) {
  bool any = false;
  for (int64_t c = 0; c < l.c; ++c) any |= grad_mean[c] != 0 || grad_invstd[c] != 0;
  if (!any) return;
  parallel_for(0, l.n * l.c, 1, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t c = plane % l.c;
      const BatchNormGradCoefficients k(l.count(), invstd[c], 0.0, 0.0, 0.0, grad_mean[c], grad_invstd[c]);
      const float centered = static_cast<float>(k.centered_coef), shift = static_cast<float>(k.shift);
      for (int64_t i = plane * l.s; i < (plane + 1) * l.s; ++i) dx[i] += centered * (x[i] - mean[c]) + shift;
    }
  });
}

// inputs: grad_out, grad_mean, grad_invstd, input, mean, invstd[, weight].
void train_grad_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[3];
  if (x.numel() == 0) return;
  const NormLayout l = norm_layout(x.shape());
  const bool affine = ctx.inputs.size() == 7;
  const NormKey key = make_key(l, ctx.attrs.get<double>("eps"), true);
  const ThreadCapScope cap(elementwise_threads(x.numel()));
  const auto cached = primitives(key);  // held while it runs: another thread may evict it
  const NormPrimitives& p = *cached;
  const float* invstd = ctx.inputs[5].data_ptr<float>();
  // The biased variance the forward saw; oneDNN adds eps back, so precision holds even when it is tiny.
  std::vector<float> variance(static_cast<size_t>(l.c)), ones, zeros;
  for (int64_t c = 0; c < l.c; ++c) {
    variance[c] = static_cast<float>(1.0 / (static_cast<double>(invstd[c]) * invstd[c]) - static_cast<double>(key.eps));
  }
  dnnl::stream stream = stream_for_call();
  run_primitive(p.backward_primitive, stream, {{DNNL_ARG_SRC, memory(plain(key.dims), engine(), x.data_ptr())},
                                               {DNNL_ARG_MEAN, memory(plain({l.c}), engine(), ctx.inputs[4].data_ptr())},
                                               {DNNL_ARG_VARIANCE, memory(plain({l.c}), engine(), variance.data())},
                                               {DNNL_ARG_DIFF_DST, memory(plain(key.dims), engine(), ctx.inputs[0].data_ptr())},
                                               {DNNL_ARG_SCALE, channel_memory(l, affine ? &ctx.inputs[6] : nullptr, ones, 1.0f)},
                                               // Unused by the gradient, but oneDNN 2.6 refuses to run without it.
                                               {DNNL_ARG_SHIFT, channel_memory(l, nullptr, zeros, 0.0f)},
                                               {DNNL_ARG_DIFF_SRC, memory(plain(key.dims), engine(), ctx.outputs[0].data_ptr())},
                                               {DNNL_ARG_DIFF_SCALE, memory(plain({l.c}), engine(), ctx.outputs[1].data_ptr())},
                                               {DNNL_ARG_DIFF_SHIFT, memory(plain({l.c}), engine(), ctx.outputs[2].data_ptr())}});
  stream.wait();
  add_statistics_paths(l, x.data_ptr<float>(), ctx.inputs[4].data_ptr<float>(), invstd, ctx.inputs[1].data_ptr<float>(),
                       ctx.inputs[2].data_ptr<float>(), ctx.outputs[0].data_ptr<float>());
}

FLOW_REGISTER_KERNEL("batch_norm_eval", DeviceType::kCPU, {kFloat32}, eval_kernel);
FLOW_REGISTER_KERNEL("batch_norm_train", DeviceType::kCPU, {kFloat32}, train_kernel);
FLOW_REGISTER_KERNEL("batch_norm_train_grad", DeviceType::kCPU, {kFloat32}, train_grad_kernel);

}  // namespace
}  // namespace flow::cpu
