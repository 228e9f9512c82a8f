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
#include "core/random.h"
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
  // A 0-d input's result is 0-d, its one element, whether k is 1 or 0 (PyTorch copies it).
  const int64_t k = ctx.inputs[0].dim() == 0 ? 1 : ctx.attrs.get<int64_t>("k");
  select_lines(ctx, ctx.attrs.get<int64_t>("dim"), k, ctx.attrs.get<bool>("largest"), ctx.attrs.get<bool>("sorted"), "topk");
}

// PyTorch's checks of the weights, with its messages: the path it takes without replacement (or
// for one sample) checks the extremes, the one drawing many with replacement each entry in turn
// (NaN failing its `>= 0` first).
template <typename T>
void check_weights(const T* w, int64_t rows, int64_t categories, bool per_entry) {
  for (int64_t r = 0; r < rows; ++r) {
    double total = 0;
    for (int64_t c = 0; c < categories; ++c) {
      const double v = static_cast<double>(w[r * categories + c]);
      if (!per_entry && !(v >= 0 && v < INFINITY)) fail("multinomial", "probability tensor contains either `inf`, `nan` or element < 0");
      if (per_entry && !(v >= 0)) fail("multinomial", "invalid multinomial distribution (encountering probability entry < 0)");
      if (per_entry && !std::isfinite(v)) fail("multinomial", "invalid multinomial distribution (encountering probability entry = infinity or NaN)");
      total += v;
    }
    if (!(total > 0)) fail("multinomial", "invalid multinomial distribution (sum of probabilities <= 0)");
  }
}

// Row r draws from Philox counters offset + r * (counters per row), as the functional call reserved.
// With replacement, each sample inverts the row's cumulative weights at one uniform. Without, each
// weight w_c is divided by an Exp(1) variable E_c and the num_samples largest w_c / E_c are taken in
// order: the smallest of independent E_c / w_c is category c with probability w_c / sum w, and by
// memorylessness the rest are again such a race, so this is drawing one at a time from the
// remaining weights (what PyTorch does too).
void multinomial_kernel(KernelContext& ctx) {
  const Tensor& input = ctx.inputs[0];
  const int64_t categories = input.size(-1), rows = input.dim() == 2 ? input.size(0) : 1;
  const int64_t num_samples = ctx.attrs.get<int64_t>("num_samples");
  const bool replacement = ctx.attrs.get<bool>("replacement");
  const auto seed = static_cast<uint64_t>(ctx.attrs.get<int64_t>("seed"));
  const auto offset = static_cast<uint64_t>(ctx.attrs.get<int64_t>("offset"));
  int64_t* out = static_cast<int64_t*>(ctx.outputs[0].data_ptr());
  FLOW_DISPATCH_FLOATING(input.dtype(), "multinomial", [&]<typename T>() {
    const T* weights = static_cast<const T*>(input.data_ptr());
    check_weights(weights, rows, categories, replacement && num_samples > 1);
    const auto uniform = [&](uint64_t counter) {
      uint32_t words[4];
      Philox::block(seed, offset + counter, words);
      return Philox::to_unit53(words[0], words[1]);
    };
    const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max(categories, num_samples));
    parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
      std::vector<double> cumulative(static_cast<size_t>(categories));  // without replacement: the keys
      std::vector<int64_t> order(static_cast<size_t>(categories));
      for (int64_t r = begin; r < end; ++r) {
        const T* w = weights + r * categories;
        int64_t* samples = out + r * num_samples;
        if (replacement) {
          double total = 0;
          for (int64_t c = 0; c < categories; ++c) cumulative[static_cast<size_t>(c)] = total += static_cast<double>(w[c]);
          for (int64_t s = 0; s < num_samples; ++s) {
            // The first category whose cumulative weight exceeds u * total: never a zero weight. When
            // u * total rounds up to total, the first reaching total: the last positive weight.
            const double target = uniform(static_cast<uint64_t>(r * num_samples + s)) * total;
            auto chosen = std::upper_bound(cumulative.begin(), cumulative.end(), target);
            if (chosen == cumulative.end()) chosen = std::lower_bound(cumulative.begin(), cumulative.end(), total);
            samples[s] = chosen - cumulative.begin();
          }
          continue;
        }
        for (int64_t c = 0; c < categories; ++c) {
          // u in (0, 1), so E = -log u is positive and finite.
          const double u = uniform(static_cast<uint64_t>(r * categories + c)) + 0x1p-54;
          cumulative[static_cast<size_t>(c)] = static_cast<double>(w[c]) / -std::log(u);  // the key w_c / E_c
        }
        std::iota(order.begin(), order.end(), int64_t{0});
        const auto larger = [&](int64_t a, int64_t b) {
          const double x = cumulative[static_cast<size_t>(a)], y = cumulative[static_cast<size_t>(b)];
          return x != y ? x > y : a < b;
        };
        std::partial_sort(order.begin(), order.begin() + num_samples, order.end(), larger);
        std::copy(order.begin(), order.begin() + num_samples, samples);
      }
    });
  });
}

FLOW_REGISTER_KERNEL("sort", DeviceType::kCPU, numeric_dtypes(), sort_kernel);
FLOW_REGISTER_KERNEL("topk", DeviceType::kCPU, numeric_dtypes(), topk_kernel);
FLOW_REGISTER_KERNEL("multinomial", DeviceType::kCPU, floating_dtypes(), multinomial_kernel);

}  // namespace
}  // namespace flow::cpu
