// CPU kernels of tril/triu: per matrix row, the kept columns form one run, copied as bytes; the
// rest are zero bits (0 in every dtype), so one kernel serves all dtypes without widening.
#include <algorithm>
#include <cstring>

#include "core/op.h"
#include "core/thread_pool.h"

namespace flow::cpu {
namespace {

template <bool lower>
void triangular_kernel(KernelContext& ctx) {
  const Tensor& input = ctx.inputs[0];
  const int64_t rows = input.size(-2), cols = input.size(-1);
  const int64_t diagonal = ctx.attrs.get<int64_t>("diagonal");
  const size_t item = itemsize(input.dtype());
  const auto* in = static_cast<const char*>(input.data_ptr());
  auto* out = static_cast<char*>(ctx.outputs[0].data_ptr());
  const int64_t total_rows = cols == 0 ? 0 : input.numel() / cols;
  parallel_for(0, total_rows, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(cols, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t i = r % rows;
      // Kept columns [first, last): j <= i + diagonal (tril) or j >= i + diagonal (triu), computed
      // so that a diagonal near the int64 limits cannot overflow.
      const int64_t bound = diagonal > cols ? cols + 1 : diagonal < -rows ? -rows - 1 : diagonal;
      const int64_t first = lower ? 0 : std::clamp<int64_t>(i + bound, 0, cols);
      const int64_t last = lower ? std::clamp<int64_t>(i + bound + 1, 0, cols) : cols;
      const char* src = in + r * cols * item;
      char* dst = out + r * cols * item;
      std::memset(dst, 0, first * item);
      std::memcpy(dst + first * item, src + first * item, (last - first) * item);
      std::memset(dst + last * item, 0, (cols - last) * item);
    }
  });
}

FLOW_REGISTER_KERNEL("tril", DeviceType::kCPU, all_dtypes(), triangular_kernel<true>);
FLOW_REGISTER_KERNEL("triu", DeviceType::kCPU, all_dtypes(), triangular_kernel<false>);

}  // namespace
}  // namespace flow::cpu
