#include "core/kernels/cpu/reduced_float.h"

#include "core/ops/copy.h"

namespace flow::cpu {
namespace {

bool is_reduced_float(const Tensor& t) { return t.defined() && is_reduced_floating(t.dtype()); }

Tensor widened(const Tensor& t) {
  Tensor wide = make_tensor(t.shape(), kFloat32, t.device());
  detail::copy_into(wide, t);
  return wide;
}

}  // namespace

KernelFn computed_in_float32(KernelFn float32_kernel) {
  return [float32_kernel = std::move(float32_kernel)](KernelContext& ctx) {
    TensorList inputs;
    inputs.reserve(ctx.inputs.size());
    for (const Tensor& t : ctx.inputs) inputs.push_back(is_reduced_float(t) ? widened(t) : t);
    TensorList outputs;
    outputs.reserve(ctx.outputs.size());
    for (const Tensor& out : ctx.outputs) {
      if (!is_reduced_float(out)) {
        outputs.push_back(out);
        continue;
      }
      Tensor wide;
      for (size_t i = 0; i < ctx.inputs.size() && !wide.defined(); ++i) {
        if (is_reduced_float(ctx.inputs[i]) && ctx.inputs[i].data_ptr() == out.data_ptr()) wide = inputs[i];
      }
      outputs.push_back(wide.defined() ? wide : make_tensor(out.shape(), kFloat32, out.device()));
    }
    KernelContext wide_ctx{inputs, outputs, ctx.attrs};
    float32_kernel(wide_ctx);
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (is_reduced_float(ctx.outputs[i])) detail::copy_into(ctx.outputs[i], outputs[i]);
    }
  };
}

}  // namespace flow::cpu
