#include <glog/logging.h>

#include "core/kernels/cpu/convert.h"
#include "core/kernels/cpu/loop.h"
#include "core/op.h"
#include "core/ops/view.h"

#include <cstring>

namespace flow::cpu {
namespace {

void copy_kernel_into(Tensor out, const Tensor& in) {
  CHECK(in.device().is_cpu() && out.device().is_cpu());
  FLOW_DISPATCH_STORAGE(in.dtype(), "copy", [&]<typename In>() {
    FLOW_DISPATCH_STORAGE(out.dtype(), "copy", [&]<typename Out>() {
      unary_loop<Out, In>(out, in, [](In v) { return convert<Out>(v); });
    });
  });
}

void copy_kernel(KernelContext& ctx) { copy_kernel_into(ctx.outputs[0], ctx.inputs[0]); }

FLOW_REGISTER_KERNEL("copy", DeviceType::kCPU, storage_dtypes(), copy_kernel);


void slice_grad_kernel(KernelContext& ctx) {
  Tensor& out = ctx.outputs[0];
  std::memset(out.data_ptr(), 0, static_cast<size_t>(out.numel()) * itemsize(out.dtype()));
  copy_kernel_into(detail::slice_alias(out, ctx.attrs), ctx.inputs[0]);
}

FLOW_REGISTER_KERNEL("slice_grad", DeviceType::kCPU, all_dtypes(), slice_grad_kernel);

}  // namespace
}  // namespace flow::cpu
