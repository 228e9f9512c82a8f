#include <glog/logging.h>

#include "core/kernels/cpu/convert.h"
#include "core/kernels/cpu/loop.h"
#include "core/op.h"

namespace flow::cpu {
namespace {

void copy_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.inputs[0];
  Tensor& out = ctx.outputs[0];
  CHECK(in.device().is_cpu() && out.device().is_cpu());
  FLOW_DISPATCH_ALL(in.dtype(), "copy", [&]<typename In>() {
    FLOW_DISPATCH_ALL(out.dtype(), "copy", [&]<typename Out>() {
      unary_loop<Out, In>(out, in, [](In v) { return convert<Out>(v); });
    });
  });
}

FLOW_REGISTER_KERNEL("copy", DeviceType::kCPU, all_dtypes(), copy_kernel);

}  // namespace
}  // namespace flow::cpu
