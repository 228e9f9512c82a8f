// CPU kernel of cumsum. Each (outer, block of inner columns) task walks the dim once, keeping one
// accumulator per column, so the reads stay sequential whichever dim is scanned. Floating values
// accumulate in double (PyTorch's CPU acc_type); integers wrap, as in the other integer ops.
#include <algorithm>
#include <type_traits>

#include "core/op.h"
#include "core/thread_pool.h"

namespace flow::cpu {
namespace {

template <typename T>
using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;

template <typename A>
A wrapping_add(A a, A b) {
  if constexpr (std::is_integral_v<A>) return static_cast<A>(static_cast<std::make_unsigned_t<A>>(a) + static_cast<std::make_unsigned_t<A>>(b));
  else return a + b;
}

constexpr int64_t kColumns = 64;  // inner columns per task: one accumulator each, on the stack

void cumsum_kernel(KernelContext& ctx) {
  const Tensor& input = ctx.inputs[0];
  const int64_t dim = ctx.attrs.get<int64_t>("dim");
  const bool reverse = ctx.attrs.get<bool>("reverse");
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= input.size(d);
  for (int64_t d = dim + 1; d < input.dim(); ++d) inner *= input.size(d);
  const int64_t n = input.dim() == 0 ? 1 : input.size(dim);
  const int64_t blocks = (inner + kColumns - 1) / kColumns;
  FLOW_DISPATCH_NUMERIC(input.dtype(), "cumsum", [&]<typename T>() {
    const T* in = static_cast<const T*>(input.data_ptr());
    T* out = static_cast<T*>(ctx.outputs[0].data_ptr());
    const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(n * std::min(inner, kColumns), 1));
    parallel_for(0, outer * blocks, grain, [&](int64_t begin, int64_t end) {
      Acc<T> acc[kColumns];
      for (int64_t task = begin; task < end; ++task) {
        const int64_t o = task / blocks, c0 = (task % blocks) * kColumns, width = std::min(kColumns, inner - c0);
        std::fill(acc, acc + width, Acc<T>(0));
        for (int64_t step = 0; step < n; ++step) {
          const int64_t offset = (o * n + (reverse ? n - 1 - step : step)) * inner + c0;
          for (int64_t k = 0; k < width; ++k) {
            acc[k] = wrapping_add(acc[k], static_cast<Acc<T>>(in[offset + k]));
            out[offset + k] = static_cast<T>(acc[k]);
          }
        }
      }
    });
  });
}

FLOW_REGISTER_KERNEL("cumsum", DeviceType::kCPU, numeric_dtypes(), cumsum_kernel);

}  // namespace
}  // namespace flow::cpu
