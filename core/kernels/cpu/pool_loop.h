#pragma once
// Window loops of 2-d pooling over one (H, W) plane: max pooling with indices and its gradient,
// float64 average pooling (pool.cpp). Also max pooling over a channel-blocked layout
// (max_pool2d_inference, oneflow_lite's blocked layouts).
#include <glog/logging.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cstdint>
#include <type_traits>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "core/half.h"
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

// Outputs [begin, end) of a row have windows whole inside the plane's width.
struct WholeColumns {
  int64_t begin, end;
};
inline WholeColumns whole_columns(const PoolGeometry& g) {
  const int64_t begin = std::min(g.ow, (g.pw + g.sw - 1) / g.sw);
  return {begin, std::max(begin, std::min(g.ow, g.w + g.pw >= g.kw ? (g.w + g.pw - g.kw) / g.sw + 1 : 0))};
}

#if defined(__AVX2__)
namespace pool_simd {

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const BFloat16* p) {  // exact: a bfloat16 is a float32's high half
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
// The first n (0-8) of the 8 values at p, zeros after them: never reads past them.
inline __m256 load_first(const float* p, int64_t n) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(n)), lanes));
}
inline __m256 load_first(const BFloat16* p, int64_t n) {  // n even: whole 32-bit pairs
  const __m128i lanes = _mm_setr_epi32(0, 1, 2, 3);
  const __m128i pairs = _mm_maskload_epi32(reinterpret_cast<const int*>(p), _mm_cmpgt_epi32(_mm_set1_epi32(static_cast<int32_t>(n / 2)), lanes));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(pairs), 16));
}
inline void store8(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
// v holds values loaded by load8 (a selection computes nothing new), so the high halves are exact.
inline void store8(BFloat16* p, __m256 v) {
  const __m256i high = _mm256_srli_epi32(_mm256_castps_si256(v), 16);
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(high, high), _MM_SHUFFLE(3, 1, 2, 0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
}

// The even and the odd elements of 16 consecutive values lo (0-7), hi (8-15).
inline void deinterleave(__m256 lo, __m256 hi, __m256& even, __m256& odd) {
  const auto in_order = [](__m256 v) { return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), _MM_SHUFFLE(3, 1, 2, 0))); };
  even = in_order(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0)));
  odd = in_order(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1)));
}

// One step of max_pool_plane's scan on 8 windows at once: v (at `offset` in its window) replaces
// the best when larger, or when NaN and the best is not.
inline void visit(__m256& best, __m256i& best_offset, __m256 v, __m256i offset) {
  const __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ),
                                   _mm256_and_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q), _mm256_cmp_ps(best, best, _CMP_ORD_Q)));
  best = _mm256_blendv_ps(best, v, take);
  best_offset = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(best_offset), _mm256_castsi256_ps(offset), take));
}

}  // namespace pool_simd

// 2x2 windows of column stride 2 whole inside the plane, 8 at a time: outputs [x0, end) of the
// row whose windows start at input row `row`. Same values and indices as max_pool_window's scan,
// which took 2.7-4.6 ms per call of the LeNet pools (64x32x26x26) on the GPU machine's Xeon: a
// chain of dependent selections per window.
template <typename T>
void max_pool_row_2x2(const PoolGeometry& g, const T* src, int64_t row, int64_t x0, int64_t end, T* out_row, int64_t* index_row) {
  using namespace pool_simd;
  const T* top = src + row * g.w;
  const auto w = static_cast<int32_t>(g.w);
  const __m256i right = _mm256_set1_epi32(1), below = _mm256_set1_epi32(w), diagonal = _mm256_set1_epi32(w + 1);
  const __m256i lane_columns = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  // The 8 windows whose top-left corners are top_row[0, 2, ..., 14] (the first at plane column
  // `column`), loaded whole or, for the row's last `outputs` < 8 windows, only those: reading 16
  // columns would pass the row's end (and the plane's, on its last row).
  auto eight = [&](const T* top_row, int64_t column, int64_t outputs, T* out, int64_t* indices) {
    const T* bottom_row = top_row + g.w;
    const auto load16 = [outputs](const T* p, __m256& even, __m256& odd) {
      if (outputs == 8) return deinterleave(load8(p), load8(p + 8), even, odd);
      deinterleave(load_first(p, std::min<int64_t>(2 * outputs, 8)), load_first(p + 8, std::max<int64_t>(2 * outputs - 8, 0)), even, odd);
    };
    __m256 top_left, top_right, bottom_left, bottom_right;
    load16(top_row, top_left, top_right);
    load16(bottom_row, bottom_left, bottom_right);
    __m256 best = top_left;
    __m256i offset = _mm256_setzero_si256();
    visit(best, offset, top_right, right);
    visit(best, offset, bottom_left, below);
    visit(best, offset, bottom_right, diagonal);
    alignas(32) T best_copy[8];
    alignas(32) int64_t index_copy[8];
    const bool whole = outputs == 8;
    store8(whole ? out : best_copy, best);
    if (indices != nullptr) {
      const __m256i index = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int32_t>(row * g.w + column)), _mm256_add_epi32(lane_columns, offset));
      int64_t* index_out = whole ? indices : index_copy;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(index_out), _mm256_cvtepi32_epi64(_mm256_castsi256_si128(index)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(index_out + 4), _mm256_cvtepi32_epi64(_mm256_extracti128_si256(index, 1)));
    }
    if (whole) return;
    std::copy_n(best_copy, outputs, out);
    if (indices != nullptr) std::copy_n(index_copy, outputs, indices);
  };
  for (; x0 < end; x0 += 8) {
    const int64_t column = x0 * 2 - g.pw;
    eight(top + column, column, std::min<int64_t>(8, end - x0), out_row + x0, index_row ? index_row + x0 : nullptr);
  }
}
#endif

// max_pool_row_2x2 16 windows at a time, on CPUs with AVX-512 (pool_avx512.cpp; callers check
// has_avx512_core()).
void max_pool_row_2x2_avx512(const PoolGeometry& g, const float* src, int64_t row, int64_t x0, int64_t end, float* out_row,
                             int64_t* index_row);
void max_pool_row_2x2_avx512(const PoolGeometry& g, const BFloat16* src, int64_t row, int64_t x0, int64_t end, BFloat16* out_row,
                             int64_t* index_row);
// The input gradient of one plane of a max pooling over 2x2 windows of stride 2, unpadded, whose
// plane has fewer than INT32_MAX values, written window by window with AVX-512: the output
// gradient at the argmax, +0 at the window's other inputs and where no window reaches. Same
// values as max_pool_grad_scatter's zeros and sums. False where an index is not in its window
// (some of the plane written): the plane is then the scatter's to write.
bool max_pool_grad_plane_2x2_avx512(const PoolGeometry& g, const float* dy, const int64_t* indices, float* dx);
bool max_pool_grad_plane_2x2_avx512(const PoolGeometry& g, const BFloat16* dy, const int64_t* indices, BFloat16* dx);

// Max and first argmax (flat h*w index; skipped when index_row is null) of output x0's window in
// one row of a plane; NaN wins and stays. Kh, Kw > 0 fix the window size at compile time for
// windows whole inside the plane (unrolled: 2x2 windows 3x faster).
template <typename T, int Kh, int Kw>
void max_pool_window(const PoolGeometry& g, const T* src, WindowRange rows, bool whole_rows, int64_t x0, T* out_row, int64_t* index_row) {
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
  out_row[x0] = best;
  if (index_row) index_row[x0] = best_index;
}

// max_pool_window over every window of one plane; Kh = Kw = 0 takes the sizes at run time. With
// AVX2, whole 2x2 windows of stride 2 in float32 and bfloat16 run 8 at a time (max_pool_row_2x2),
// 16 at a time where `avx512` (the CPU has it: has_avx512_core()).
template <typename T, int Kh = 0, int Kw = 0>
void max_pool_plane(const PoolGeometry& g, const T* src, T* out, int64_t* indices, [[maybe_unused]] bool avx512) {
  [[maybe_unused]] const WholeColumns whole = whole_columns(g);
  for (int64_t y = 0; y < g.oh; ++y) {
    const WindowRange rows = window(y, g.sh, g.ph, g.kh, g.h);
    const bool whole_rows = Kh > 0 && rows.end - rows.begin == Kh;
    T* out_row = out + y * g.ow;
    int64_t* index_row = indices ? indices + y * g.ow : nullptr;
    int64_t x0 = 0;
#if defined(__AVX2__)
    if constexpr (Kh == 2 && Kw == 2 && (std::is_same_v<T, float> || std::is_same_v<T, BFloat16>)) {
      if (whole_rows && g.sw == 2 && g.plane_in() <= INT32_MAX) {
        for (; x0 < whole.begin; ++x0) max_pool_window<T, Kh, Kw>(g, src, rows, whole_rows, x0, out_row, index_row);
        if (avx512) {
          max_pool_row_2x2_avx512(g, src, rows.begin, x0, whole.end, out_row, index_row);
        } else {
          max_pool_row_2x2(g, src, rows.begin, x0, whole.end, out_row, index_row);
        }
        x0 = whole.end;
      }
    }
#endif
    for (; x0 < g.ow; ++x0) max_pool_window<T, Kh, Kw>(g, src, rows, whole_rows, x0, out_row, index_row);
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
template <int Kh, int Kw>
__m256 window_max(const float* corner, int64_t row_stride, int64_t pixel) {
  __m256 v[Kh * Kw];
#pragma GCC unroll 16
  for (int i = 0; i < Kh * Kw; ++i) v[i] = _mm256_loadu_ps(corner + (i / Kw) * row_stride + (i % Kw) * pixel);
#pragma GCC unroll 4
  for (int width = 1; width < Kh * Kw; width *= 2) {
#pragma GCC unroll 8
    for (int i = 0; i + width < Kh * Kw; i += 2 * width) v[i] = max_keeping_nan(v[i], v[i + width]);
  }
  return v[0];
}
#endif

// Where the planes of a pooling over channel blocks lie. nChw<Block>c keeps one block's pixels side
// by side, plane after plane; channels-last (NHWC) interleaves an image's blocks, so a pixel of one
// block is C floats from the next and the image's blocks are Block floats apart.
struct BlockedPlanes {
  int64_t pixel;                // floats from one pixel of a plane to the next
  int64_t per_image;            // planes one image interleaves (1: none)
  int64_t image_in, image_out;  // floats from one image (or plane, when per_image is 1) to the next
  int64_t block;                // floats between an image's interleaved planes
  int64_t in_offset(int64_t plane) const { return plane / per_image * image_in + plane % per_image * block; }
  int64_t out_offset(int64_t plane) const { return plane / per_image * image_out + plane % per_image * block; }
};

// The max of every window over a channel-blocked layout: Block channels side by side in each of
// g.planes planes (Block 1 is NCHW), laid out as `planes` says; output rows [begin, end) of all
// planes' g.oh rows each, plane after plane. NaN wins and stays, and a window of -inf gives -inf,
// as in max_pool_plane. With AVX2, blocks of 8 run as vector compare-and-blends: oneDNN 2.6's AVX2
// max pooling on nChw8c measured 7x slower than this on an AMD EPYC (64x32x26x26, 2x2 windows:
// 1.85 vs 0.26 ms), and it skips NaN. Kh, Kw > 0 fix the window size at compile time for windows
// that lie whole inside the plane.
template <int Block, int Kh = 0, int Kw = 0>
void max_pool_blocked(const PoolGeometry& g, const BlockedPlanes& planes, const float* src, float* out, int64_t begin, int64_t end) {
  const WholeColumns whole = whole_columns(g);
  const int64_t pixel = planes.pixel;
  for (int64_t unit = begin; unit < end; ++unit) {
    const int64_t plane = unit / g.oh, y = unit % g.oh;
    const float* in = src + planes.in_offset(plane);
    float* result = out + planes.out_offset(plane);
    const WindowRange rows = window(y, g.sh, g.ph, g.kh, g.h);
    float* out_row = result + y * g.ow * pixel;
    int64_t x0 = 0;
    auto pool_window = [&] {
      const WindowRange cols = window(x0, g.sw, g.pw, g.kw, g.w);
      const int64_t width = cols.end - cols.begin;
      const float* row = in + (rows.begin * g.w + cols.begin) * pixel;
      float* o = out_row + x0 * pixel;
#if defined(__AVX2__)
      if constexpr (Block % 8 == 0) {
        __m256 best[Block / 8];
        for (int k = 0; k < Block / 8; ++k) best[k] = _mm256_loadu_ps(row + 8 * k);
        for (int64_t iy = rows.begin; iy < rows.end; ++iy, row += g.w * pixel) {
          for (int64_t ix = 0; ix < width; ++ix) {
            for (int k = 0; k < Block / 8; ++k) best[k] = max_keeping_nan(best[k], _mm256_loadu_ps(row + ix * pixel + 8 * k));
          }
        }
        for (int k = 0; k < Block / 8; ++k) _mm256_storeu_ps(o + 8 * k, best[k]);
        return;
      }
#endif
      float best[Block];
      for (int lane = 0; lane < Block; ++lane) best[lane] = row[lane];
      for (int64_t iy = rows.begin; iy < rows.end; ++iy, row += g.w * pixel) {
        for (int64_t ix = 0; ix < width; ++ix) {
          for (int lane = 0; lane < Block; ++lane) {
            const float v = row[ix * pixel + lane];
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
        for (; x0 < whole.begin; ++x0) pool_window();
        const float* corner = in + (rows.begin * g.w + x0 * g.sw - g.pw) * pixel;
        for (; x0 < whole.end; ++x0, corner += g.sw * pixel) {
          for (int k = 0; k < Block / 8; ++k) {
            _mm256_storeu_ps(out_row + x0 * pixel + 8 * k, window_max<Kh, Kw>(corner + 8 * k, g.w * pixel, pixel));
          }
        }
      }
    }
#endif
    for (; x0 < g.ow; ++x0) pool_window();
  }
}

// max_pool_blocked over all g.planes on flow's threads; `block` is 1, 8, 16, 32 or 64. The threads
// split output rows, not planes: at batch 1 a channels-last layout of up to 64 channels is one
// plane (resnet's 3x3 pooling after the stem ran on one thread of two).
inline void max_pool_blocked(const PoolGeometry& g, const BlockedPlanes& planes, int block, const float* src, float* out) {
  CHECK(block == 1 || block == 8 || block == 16 || block == 32 || block == 64) << "no blocked max pooling for blocks of " << block;
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(g.sh * g.w * block, 1));
  with_fixed_window(g, [&]<int Kh, int Kw>() {
    parallel_for(0, g.planes * g.oh, grain, [&](int64_t begin, int64_t end) {
      switch (block) {
        case 1: max_pool_blocked<1>(g, planes, src, out, begin, end); break;
        case 8: max_pool_blocked<8, Kh, Kw>(g, planes, src, out, begin, end); break;
        case 16: max_pool_blocked<16, Kh, Kw>(g, planes, src, out, begin, end); break;
        case 32: max_pool_blocked<32, Kh, Kw>(g, planes, src, out, begin, end); break;
        default: max_pool_blocked<64, Kh, Kw>(g, planes, src, out, begin, end);
      }
    });
  });
}

// The planes of nChw<block>c (block 1: NCHW); g from blocked_pool_geometry.
inline BlockedPlanes channel_blocked_planes(const PoolGeometry& g, int block) {
  return {block, 1, g.plane_in() * block, g.plane_out() * block, 0};
}

// Max pooling over nChw<block>c (block 1: NCHW); g from blocked_pool_geometry.
inline void max_pool_blocked(const PoolGeometry& g, int block, const float* src, float* out) {
  max_pool_blocked(g, channel_blocked_planes(g, block), block, src, out);
}

// The channels a max pooling over channels-last (NHWC) takes together: up to 64 where vectors of 8
// divide the channel count (a pixel's channels at once read whole cache lines in order), else 1.
inline int channels_last_block(int64_t channels) {
  for (int block : {64, 32, 16, 8}) {
    if (channels % block == 0) return block;
  }
  return 1;
}

// The planes of channels-last (NHWC) with `channels` channels, channels_last_block(channels) to a
// plane; g from blocked_pool_geometry with that block.
inline BlockedPlanes channels_last_planes(const PoolGeometry& g, int64_t channels) {
  const int block = channels_last_block(channels);
  return {channels, channels / block, g.plane_in() * channels, g.plane_out() * channels, block};
}

// Max pooling over channels-last (NHWC) with `channels` channels; g as for channels_last_planes.
inline void max_pool_channels_last(const PoolGeometry& g, int64_t channels, const float* src, float* out) {
  max_pool_blocked(g, channels_last_planes(g, channels), channels_last_block(channels), src, out);
}

}  // namespace flow::cpu
