// CPU kernels of softmax/log_softmax: per (outer, inner) slice along the dim, max-shifted,
// in three passes (max, sum of exp, normalise). The sum of exps accumulates in double: a float32
// running sum over a long row (a 50257-word vocabulary) loses about 1e-5 relative, 10x what
// PyTorch's cascade sum loses.
#include <cmath>
#include <limits>

#include "core/op.h"
#include "core/thread_pool.h"

namespace flow::cpu {
namespace {

template <bool log_output>
void softmax_kernel(KernelContext& ctx) {
  const Tensor& input = ctx.inputs[0];
  const int64_t dim = ctx.attrs.get<int64_t>("dim");
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= input.size(d);
  for (int64_t d = dim + 1; d < input.dim(); ++d) inner *= input.size(d);
  const int64_t n = input.dim() == 0 ? 1 : input.size(dim);
  FLOW_DISPATCH_FLOATING(input.dtype(), log_output ? "log_softmax" : "softmax", [&]<typename T>() {
    const T* in = static_cast<const T*>(input.data_ptr());
    T* out = static_cast<T*>(ctx.outputs[0].data_ptr());
    parallel_for(0, outer * inner, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(n, 1)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t s = begin; s < end; ++s) {
                     const int64_t base = (s / inner) * n * inner + s % inner;
                     const T* x = in + base;
                     T* y = out + base;
                     T max_value = -std::numeric_limits<T>::infinity();
                     for (int64_t i = 0; i < n; ++i) max_value = std::max(max_value, x[i * inner]);
                     if (std::isinf(max_value)) max_value = 0;  // all -inf: keep exp finite (gives nan like PyTorch)
                     double total = 0;
                     for (int64_t i = 0; i < n; ++i) {
                       const T e = std::exp(x[i * inner] - max_value);
                       total += static_cast<double>(e);
                       if constexpr (!log_output) y[i * inner] = e;
                     }
                     if constexpr (log_output) {
                       const auto log_total = static_cast<T>(std::log(total));
                       for (int64_t i = 0; i < n; ++i) y[i * inner] = (x[i * inner] - max_value) - log_total;
                     } else {
                       const auto scale = static_cast<T>(1.0 / total);
                       for (int64_t i = 0; i < n; ++i) y[i * inner] *= scale;
                     }
                   }
                 });
  });
}

FLOW_REGISTER_KERNEL("softmax", DeviceType::kCPU, floating_dtypes(), softmax_kernel<false>);
FLOW_REGISTER_KERNEL("log_softmax", DeviceType::kCPU, floating_dtypes(), softmax_kernel<true>);

}  // namespace
}  // namespace flow::cpu
