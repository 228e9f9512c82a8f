// CPU kernels of sort and topk. Each line along dim is copied out as a list of positions, ordered
// by a strict total order on (value, position) — NaN above every number, ties by position — and
// written back; the lines are independent, so they run in parallel. Ordering positions instead
// of values keeps one comparison for every dtype and makes ties deterministic.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>
#include <vector>

#include "core/op.h"
#include "core/thread_pool.h"

namespace flow::cpu {
namespace {

// Whether a goes before b when ordering descending (largest first); NaN is the largest value.
template <typename T>
bool above(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return !std::isnan(b);
    if (std::isnan(b)) return false;
  }
  return a > b;
}

// A line along dim: n elements, `inner` apart, starting at outer index o.
struct Lines {
  int64_t outer = 1, n = 1, inner = 1;
  Lines(const Tensor& t, int64_t dim) {
    for (int64_t d = 0; d < dim; ++d) outer *= t.size(d);
    if (t.dim() > 0) n = t.size(dim);
    for (int64_t d = dim + 1; d < t.dim(); ++d) inner *= t.size(d);
  }
  int64_t count() const { return outer * inner; }
  int64_t start(int64_t line, int64_t length) const { return (line / inner) * length * inner + line % inner; }
};

// Writes the first k positions of each line in the order `before` defines, with their values;
// unsorted, the k are only chosen (nth_element), not ordered.
void select_lines(KernelContext& ctx, int64_t dim, int64_t k, bool descending, bool sorted, const char* op) {
  const Tensor& input = ctx.inputs[0];
  const Lines lines(input, dim);
  const int64_t n = lines.n, inner = lines.inner;
  FLOW_DISPATCH_NUMERIC(input.dtype(), op, [&]<typename T>() {
    const T* in = static_cast<const T*>(input.data_ptr());
    T* values = static_cast<T*>(ctx.outputs[0].data_ptr());
    int64_t* indices = static_cast<int64_t*>(ctx.outputs[1].data_ptr());
    const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(n, 1));
    parallel_for(0, lines.count(), grain, [&](int64_t begin, int64_t end) {
      std::vector<int64_t> order(static_cast<size_t>(n));
      for (int64_t line = begin; line < end; ++line) {
        const T* src = in + lines.start(line, n);
        const auto before = [&](int64_t a, int64_t b) {
          const T x = src[a * inner], y = src[b * inner];
          if (above(x, y)) return descending;
          if (above(y, x)) return !descending;
          return a < b;  // equal (or both NaN): input order
        };
        std::iota(order.begin(), order.end(), int64_t{0});
        if (k == n && sorted) std::sort(order.begin(), order.end(), before);
        else if (sorted) std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
        else if (k > 0 && k < n) std::nth_element(order.begin(), order.begin() + (k - 1), order.end(), before);
        const int64_t out = lines.start(line, k);
        for (int64_t j = 0; j < k; ++j) {
          values[out + j * inner] = src[order[static_cast<size_t>(j)] * inner];
          indices[out + j * inner] = order[static_cast<size_t>(j)];
        }
      }
    });
  });
}

void sort_kernel(KernelContext& ctx) {
  const int64_t dim = ctx.attrs.get<int64_t>("dim");
  const int64_t n = ctx.inputs[0].dim() == 0 ? 1 : ctx.inputs[0].size(dim);
  select_lines(ctx, dim, n, ctx.attrs.get<bool>("descending"), /*sorted=*/true, "sort");
}

void topk_kernel(KernelContext& ctx) {
  select_lines(ctx, ctx.attrs.get<int64_t>("dim"), ctx.attrs.get<int64_t>("k"), ctx.attrs.get<bool>("largest"),
               ctx.attrs.get<bool>("sorted"), "topk");
}

FLOW_REGISTER_KERNEL("sort", DeviceType::kCPU, numeric_dtypes(), sort_kernel);
FLOW_REGISTER_KERNEL("topk", DeviceType::kCPU, numeric_dtypes(), topk_kernel);

}  // namespace
}  // namespace flow::cpu
