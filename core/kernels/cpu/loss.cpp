// CPU kernels of the loss primitives (core/ops/loss.h).
#include <cmath>

#include "core/kernels/cpu/loop.h"
#include "core/kernels/cpu/reduced_float.h"
#include "core/op.h"

namespace flow::cpu {
namespace {

void binary_cross_entropy_kernel(KernelContext& ctx) {
  FLOW_DISPATCH_FLOATING(ctx.inputs[0].dtype(), "binary_cross_entropy", [&]<typename T>() {
    // Inputs are contiguous here; checked before the (possibly parallel) loop, which cannot throw.
    const T* p = ctx.inputs[0].data_ptr<T>();
    for (int64_t i = 0; i < ctx.inputs[0].numel(); ++i) {
      if (!(p[i] >= T(0) && p[i] <= T(1))) fail("binary_cross_entropy", "all elements of input should be between 0 and 1");
    }
    binary_loop<T, T, T>(ctx.outputs[0], ctx.inputs[0], ctx.inputs[1], [](T input, T target) {
      return (target - T(1)) * std::max(std::log1p(-input), T(-100)) - target * std::max(std::log(input), T(-100));
    });
  });
}

FLOW_REGISTER_KERNEL("binary_cross_entropy", DeviceType::kCPU, floating_dtypes(), binary_cross_entropy_kernel);
FLOW_REGISTER_KERNEL("binary_cross_entropy", DeviceType::kCPU, (std::vector<DType>{kFloat16, kBFloat16}),
                     in_float32<binary_cross_entropy_kernel>);

}  // namespace
}  // namespace flow::cpu
