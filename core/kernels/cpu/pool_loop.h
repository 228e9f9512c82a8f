#pragma once
// Window loops of 2-d pooling over one (H, W) plane: max pooling with indices and its gradient,
// float64 average pooling (pool.cpp). Also max pooling over a channel-blocked layout
// (max_pool2d_inference, oneflow_lite's blocked layouts).
#include <glog/logging.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <type_traits>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "core/op.h"
#include "core/thread_pool.h"

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

// The geometry of pooling x (N, C, H, W) into y over a channel-blocked layout: one plane per
// block of `block` channels (the last block padded).
inline PoolGeometry blocked_pool_geometry(const Shape& x, const Shape& y, const Attrs& attrs, int block) {
  PoolGeometry g = pool_geometry(x, y, attrs);
  g.planes = x[0] * ((x[1] + block - 1) / block);
  return g;
}

// fn.template operator()<Kh, Kw>() with the window size fixed at compile time where it is 2x2 or
// 3x3 (the loops unroll it), <0, 0> (sizes read at run time) otherwise.
template <typename Fn>
void with_fixed_window(const PoolGeometry& g, Fn&& fn) {
  if (g.kh == 2 && g.kw == 2) {
    fn.template operator()<2, 2>();
  } else if (g.kh == 3 && g.kw == 3) {
    fn.template operator()<3, 3>();
  } else {
    fn.template operator()<0, 0>();
  }
}

// The valid input range [begin, end) of output position o's window along one axis.
struct WindowRange {
  int64_t begin, end;
};
inline WindowRange window(int64_t o, int64_t stride, int64_t pad, int64_t kernel, int64_t size) {
  const int64_t start = o * stride - pad;
  return {std::max<int64_t>(start, 0), std::min<int64_t>(start + kernel, size)};
}

// a if take, else b, without a branch: on random data a branch mispredicts, and GCC compiles
// `take ? a : b` on floats into one (max pooling ran 2x slower so).
template <typename T>
T choose(bool take, T a, T b) {
  using Bits = std::conditional_t<sizeof(T) == 8, uint64_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint16_t>>;
  const auto mask = static_cast<Bits>(Bits(0) - static_cast<Bits>(take));  // all ones when take
  return std::bit_cast<T>(static_cast<Bits>((std::bit_cast<Bits>(a) & mask) | (std::bit_cast<Bits>(b) & static_cast<Bits>(~mask))));
}

// Max and first argmax (flat h*w index; skipped when indices is null) of every window of one
// plane; NaN wins and stays. Kh, Kw > 0 fix the window size at compile time for windows that lie
// whole inside the plane (unrolled: 2x2 windows 3x faster); edge windows and Kh = Kw = 0 take
// the sizes at run time.
template <typename T, int Kh = 0, int Kw = 0>
void max_pool_plane(const PoolGeometry& g, const T* src, T* out, int64_t* indices) {
  for (int64_t y = 0; y < g.oh; ++y) {
    const WindowRange rows = window(y, g.sh, g.ph, g.kh, g.h);
    const bool whole_rows = Kh > 0 && rows.end - rows.begin == Kh;
    for (int64_t x0 = 0; x0 < g.ow; ++x0) {
      const WindowRange cols = window(x0, g.sw, g.pw, g.kw, g.w);
      int64_t best_index = rows.begin * g.w + cols.begin;
      T best = src[best_index];
      // NaN wins and stays, as in PyTorch.
      auto visit = [&](int64_t index) {
        const T v = src[index];
        const bool take = static_cast<int>(v > best) | (static_cast<int>(v != v) & static_cast<int>(best == best));
        best = choose(take, v, best);
        best_index ^= (best_index ^ index) & -static_cast<int64_t>(take);
      };
      if (whole_rows && cols.end - cols.begin == Kw) {
        for (int iy = 0; iy < Kh; ++iy) {
          for (int ix = 0; ix < Kw; ++ix) visit((rows.begin + iy) * g.w + cols.begin + ix);
        }
      } else {
        for (int64_t iy = rows.begin; iy < rows.end; ++iy) {
          for (int64_t ix = cols.begin; ix < cols.end; ++ix) visit(iy * g.w + ix);
        }
      }
      out[y * g.ow + x0] = best;
      if (indices) indices[y * g.ow + x0] = best_index;
    }
  }
}

#if defined(__AVX2__)
// best or v, whichever is larger, v when it is NaN: one step of a scan in which the first maximum
// and the last NaN win.
inline __m256 max_keeping_nan(__m256 best, __m256 v) {
  const __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  return _mm256_blendv_ps(best, v, take);
}

// The max of 8 channels over a whole Kh x Kw window, reduced as a tree of max_keeping_nan (each
// pair an earlier part and a later one, so the scan's result): independent compares, where a
// chain would wait on each load in turn (the input of a pooling usually comes from memory).
template <int Kh, int Kw, int Block>
__m256 window_max(const float* corner, int64_t row_stride) {
  __m256 v[Kh * Kw];
#pragma GCC unroll 16
  for (int i = 0; i < Kh * Kw; ++i) v[i] = _mm256_loadu_ps(corner + (i / Kw) * row_stride + (i % Kw) * Block);
#pragma GCC unroll 4
  for (int width = 1; width < Kh * Kw; width *= 2) {
#pragma GCC unroll 8
    for (int i = 0; i + width < Kh * Kw; i += 2 * width) v[i] = max_keeping_nan(v[i], v[i + width]);
  }
  return v[0];
}
#endif

// The max of every window over a channel-blocked layout (planes, H, W, Block): Block channels side
// by side (Block 1 is NCHW). Planes [begin, end) of g.planes, each one block of channels. NaN wins
// and stays, and a window of -inf gives -inf, as in max_pool_plane. With AVX2, blocks of 8 run as
// vector compare-and-blends: oneDNN 2.6's AVX2 max pooling on nChw8c measured 7x slower than this
// on an AMD EPYC (64x32x26x26, 2x2 windows: 1.85 vs 0.26 ms), and it skips NaN. Kh, Kw > 0 fix
// the window size at compile time for windows that lie whole inside the plane.
template <int Block, int Kh = 0, int Kw = 0>
void max_pool_blocked(const PoolGeometry& g, const float* src, float* out, int64_t begin, int64_t end) {
  // Outputs [x_whole_begin, x_whole_end) of a row have windows whole inside the plane's width.
  const int64_t x_whole_begin = std::min(g.ow, (g.pw + g.sw - 1) / g.sw);
  const int64_t x_whole_end = std::max(x_whole_begin, std::min(g.ow, g.w + g.pw >= g.kw ? (g.w + g.pw - g.kw) / g.sw + 1 : 0));
  for (int64_t plane = begin; plane < end; ++plane) {
    const float* in = src + plane * g.plane_in() * Block;
    float* result = out + plane * g.plane_out() * Block;
    for (int64_t y = 0; y < g.oh; ++y) {
      const WindowRange rows = window(y, g.sh, g.ph, g.kh, g.h);
      float* out_row = result + y * g.ow * Block;
      int64_t x0 = 0;
      auto pool_window = [&] {
        const WindowRange cols = window(x0, g.sw, g.pw, g.kw, g.w);
        const int64_t width = cols.end - cols.begin;
        const float* row = in + (rows.begin * g.w + cols.begin) * Block;
        float* o = out_row + x0 * Block;
#if defined(__AVX2__)
        if constexpr (Block % 8 == 0) {
          __m256 best[Block / 8];
          for (int k = 0; k < Block / 8; ++k) best[k] = _mm256_loadu_ps(row + 8 * k);
          for (int64_t iy = rows.begin; iy < rows.end; ++iy, row += g.w * Block) {
            for (int64_t ix = 0; ix < width; ++ix) {
              for (int k = 0; k < Block / 8; ++k) best[k] = max_keeping_nan(best[k], _mm256_loadu_ps(row + ix * Block + 8 * k));
            }
          }
          for (int k = 0; k < Block / 8; ++k) _mm256_storeu_ps(o + 8 * k, best[k]);
          return;
        }
#endif
        float best[Block];
        for (int lane = 0; lane < Block; ++lane) best[lane] = row[lane];
        for (int64_t iy = rows.begin; iy < rows.end; ++iy, row += g.w * Block) {
          for (int64_t ix = 0; ix < width; ++ix) {
            for (int lane = 0; lane < Block; ++lane) {
              const float v = row[ix * Block + lane];
              best[lane] = ((v > best[lane]) | (v != v)) ? v : best[lane];
            }
          }
        }
        for (int lane = 0; lane < Block; ++lane) o[lane] = best[lane];
      };
#if defined(__AVX2__)
      if constexpr (Block % 8 == 0 && Kh > 0) {
        // Whole windows: a tight loop, so that many outputs' loads are in flight at once.
        if (rows.end - rows.begin == Kh) {
          for (; x0 < x_whole_begin; ++x0) pool_window();
          const float* corner = in + (rows.begin * g.w + x0 * g.sw - g.pw) * Block;
          for (; x0 < x_whole_end; ++x0, corner += g.sw * Block) {
            for (int k = 0; k < Block / 8; ++k) {
              _mm256_storeu_ps(out_row + x0 * Block + 8 * k, window_max<Kh, Kw, Block>(corner + 8 * k, g.w * Block));
            }
          }
        }
      }
#endif
      for (; x0 < g.ow; ++x0) pool_window();
    }
  }
}

// max_pool_blocked over all g.planes on flow's threads; `block` is 1, 8 or 16.
inline void max_pool_blocked(const PoolGeometry& g, int block, const float* src, float* out) {
  CHECK(block == 1 || block == 8 || block == 16) << "no blocked max pooling for blocks of " << block;
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(g.plane_in() * block, 1));
  with_fixed_window(g, [&]<int Kh, int Kw>() {
    parallel_for(0, g.planes, grain, [&](int64_t begin, int64_t end) {
      switch (block) {
        case 1: max_pool_blocked<1>(g, src, out, begin, end); break;
        case 8: max_pool_blocked<8, Kh, Kw>(g, src, out, begin, end); break;
        default: max_pool_blocked<16, Kh, Kw>(g, src, out, begin, end);
      }
    });
  });
}

}  // namespace flow::cpu
