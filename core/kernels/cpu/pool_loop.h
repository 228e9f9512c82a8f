#pragma once
// Window loops of 2-d pooling over one (H, W) plane: the float64 kernels, and the fallback of the
// oneDNN max pooling for planes whose result oneDNN does not define like flow does (NaN, -inf).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/op.h"

namespace flow::cpu {

struct PoolGeometry {
  int64_t planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw;
  int64_t plane_in() const { return h * w; }
  int64_t plane_out() const { return oh * ow; }
};

inline PoolGeometry pool_geometry(const Shape& x, const Shape& y, const Attrs& attrs) {
  using Pair = std::vector<int64_t>;
  const Pair &k = attrs.get<Pair>("kernel_size"), &s = attrs.get<Pair>("stride"), &p = attrs.get<Pair>("padding");
  return {x[0] * x[1], x[2], x[3], y[2], y[3], k[0], k[1], s[0], s[1], p[0], p[1]};
}

// The valid input range [begin, end) of output position o's window along one axis.
struct WindowRange {
  int64_t begin, end;
};
inline WindowRange window(int64_t o, int64_t stride, int64_t pad, int64_t kernel, int64_t size) {
  const int64_t start = o * stride - pad;
  return {std::max<int64_t>(start, 0), std::min<int64_t>(start + kernel, size)};
}

// Max and first argmax (flat h*w index; skipped when indices is null) of every window of one
// plane; NaN wins and stays.
template <typename T>
void max_pool_plane(const PoolGeometry& g, const T* src, T* out, int64_t* indices) {
  for (int64_t y = 0; y < g.oh; ++y) {
    const WindowRange rows = window(y, g.sh, g.ph, g.kh, g.h);
    for (int64_t x0 = 0; x0 < g.ow; ++x0) {
      const WindowRange cols = window(x0, g.sw, g.pw, g.kw, g.w);
      int64_t best_index = rows.begin * g.w + cols.begin;
      T best = src[best_index];
      for (int64_t iy = rows.begin; iy < rows.end; ++iy) {
        for (int64_t ix = cols.begin; ix < cols.end; ++ix) {
          const T v = src[iy * g.w + ix];
          // Branch-free select (random data would mispredict); NaN wins and stays, as in PyTorch.
          const bool take = (v > best) | ((v != v) & (best == best));
          best = take ? v : best;
          best_index = take ? iy * g.w + ix : best_index;
        }
      }
      out[y * g.ow + x0] = best;
      if (indices) indices[y * g.ow + x0] = best_index;
    }
  }
}

}  // namespace flow::cpu
