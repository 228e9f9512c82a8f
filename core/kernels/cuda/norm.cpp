// Host side of norm.cu: layer norm and its gradient over the input viewed as (rows, features),
// and the softmax gradients along a dim, registered for DeviceType::kCUDA in float32 and float64
// (the CPU kernels' floating dtypes for layer norm; softmax's 16-bit and mixed-dtype gradients
// stay on the CPU, as CUDA's softmax forward does).
#include <vector>

#include "core/kernels/cuda/host.h"
#include "core/op.h"

namespace flow::cuda {
namespace {

struct Rows {
  int64_t rows, features;
};

Rows rows_of(const Tensor& input, int64_t normalized_ndim) {
  int64_t features = 1;
  for (int64_t d = input.dim() - normalized_ndim; d < input.dim(); ++d) features *= input.size(d);
  return {features == 0 ? 0 : input.numel() / features, features};
}

// inputs: input[, weight, bias]; outputs: out, mean, rstd.
void layer_norm_kernel(KernelContext& ctx) {
  const Tensor& input = ctx.inputs[0];
  set_device(input, "layer_norm");
  const Rows r = rows_of(input, ctx.attrs.get<int64_t>("normalized_ndim"));
  const bool affine = ctx.inputs.size() == 3;
  check(layer_norm(scalar_type(input.dtype(), "layer_norm"), r.rows, r.features, ctx.attrs.get<double>("eps"), input.data_ptr(),
                   affine ? ctx.inputs[1].data_ptr() : nullptr, affine ? ctx.inputs[2].data_ptr() : nullptr, ctx.outputs[0].data_ptr(),
                   ctx.outputs[1].data_ptr(), ctx.outputs[2].data_ptr()),
        "layer_norm");
}

// inputs: grad_out, input, mean, rstd[, weight]; outputs: grad_input, grad_weight, grad_bias.
void layer_norm_grad_kernel(KernelContext& ctx) {
  const Tensor& input = ctx.inputs[1];
  set_device(input, "layer_norm_grad");
  const Rows r = rows_of(input, ctx.attrs.get<int64_t>("normalized_ndim"));
  const void* weight = ctx.inputs.size() == 5 ? ctx.inputs[4].data_ptr() : nullptr;
  check(layer_norm_grad(scalar_type(input.dtype(), "layer_norm_grad"), r.rows, r.features, ctx.inputs[0].data_ptr(), input.data_ptr(),
                        ctx.inputs[2].data_ptr(), ctx.inputs[3].data_ptr(), weight, ctx.outputs[0].data_ptr(), ctx.outputs[1].data_ptr(),
                        ctx.outputs[2].data_ptr()),
        "layer_norm_grad");
}

// inputs: grad, out (the forward's output).
template <bool log_output>
void softmax_grad_kernel(KernelContext& ctx) {
  const char* op = log_output ? "log_softmax_grad" : "softmax_grad";
  const Tensor& out = ctx.inputs[1];
  Tensor& grad_input = ctx.outputs[0];
  set_device(grad_input, op);
  if (grad_input.dtype() != out.dtype()) {
    fail(op, "CUDA computes the gradient in the output's dtype only, got ", dtype_name(out.dtype()), " to ", dtype_name(grad_input.dtype()));
  }
  const MiddleView view = along(out, ctx.attrs.get<int64_t>("dim"));
  check(softmax_grad_middle(scalar_type(out.dtype(), op), log_output, view.outer, view.n, view.inner, ctx.inputs[0].data_ptr(),
                            out.data_ptr(), grad_input.data_ptr()),
        op);
}

FLOW_REGISTER_KERNEL("layer_norm", DeviceType::kCUDA, floating_dtypes(), layer_norm_kernel);
FLOW_REGISTER_KERNEL("layer_norm_grad", DeviceType::kCUDA, floating_dtypes(), layer_norm_grad_kernel);
FLOW_REGISTER_KERNEL("softmax_grad", DeviceType::kCUDA, floating_dtypes(), softmax_grad_kernel<false>);
FLOW_REGISTER_KERNEL("log_softmax_grad", DeviceType::kCUDA, floating_dtypes(), softmax_grad_kernel<true>);

}  // namespace
}  // namespace flow::cuda
