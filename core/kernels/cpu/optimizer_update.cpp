// CPU kernel of the fused SGD update: one pass over param, grad (and momentum buffer).
#include "core/op.h"
#include "core/thread_pool.h"

namespace flow::cpu {
namespace {

void sgd_update_kernel(KernelContext& ctx) {
  const double lr = ctx.attrs.get<double>("lr"), momentum = ctx.attrs.get<double>("momentum");
  const double dampening = ctx.attrs.get<double>("dampening"), weight_decay = ctx.attrs.get<double>("weight_decay");
  const bool nesterov = ctx.attrs.get<bool>("nesterov"), initialized = ctx.attrs.get<bool>("buffer_initialized");
  const bool has_buffer = ctx.outputs.size() == 2;
  FLOW_DISPATCH_FLOATING(ctx.inputs[0].dtype(), "sgd_update", [&]<typename T>() {
    T* p = static_cast<T*>(ctx.outputs[0].data_ptr());
    const T* g = static_cast<const T*>(ctx.inputs.back().data_ptr());
    T* buf = has_buffer ? static_cast<T*>(ctx.outputs[1].data_ptr()) : nullptr;
    const T lr_t = static_cast<T>(lr), mom = static_cast<T>(momentum), keep = static_cast<T>(1.0 - dampening);
    const T wd = static_cast<T>(weight_decay);
    parallel_for(0, ctx.outputs[0].numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        T d = weight_decay != 0 ? g[i] + p[i] * wd : g[i];
        if (buf != nullptr) {
          buf[i] = initialized ? buf[i] * mom + d * keep : d;
          d = nesterov ? d + buf[i] * mom : buf[i];
        }
        p[i] = p[i] - d * lr_t;
      }
    });
  });
}

FLOW_REGISTER_KERNEL("sgd_update", DeviceType::kCPU, floating_dtypes(), sgd_update_kernel);

}  // namespace
}  // namespace flow::cpu
