// Max pooling over whole 2x2 windows of stride 2 with AVX-512, 16 windows at a time, for CPUs that
// have it: max_pool_row_2x2 (pool_loop.h), and the gradient of such pools written window by
// window. The rows of the usual pools are short (13 or 5 outputs on the LeNet pools): the AVX2
// loop runs them as a part of 8 windows whose outputs go through the stack, where masked loads and
// stores take any part here. Only these functions are compiled for AVX-512 (FLOW_AVX512_CORE_TARGET,
// as in fused.cpp), so nothing AVX-512 is shared with other files. Callers run them where
// has_avx512_core() holds (ONEDNN_MAX_CPU_ISA lowers it, as it does oneDNN's kernels).
#include <immintrin.h>

// GCC 12 warns on its own AVX-512 intrinsics here: they start from _mm512_undefined_*(), whose
// self-initialisation it reports as maybe uninitialized once they are inlined into these functions.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "core/kernels/cpu/dnnl_util.h"
#include "core/kernels/cpu/pool_loop.h"

namespace flow::cpu {
namespace {

// The first n (0-16) lanes.
FLOW_AVX512_CORE_TARGET __mmask16 first_lanes(int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

// 0, 2, ..., 30: the columns of 16 windows' top-left corners from the first one's.
FLOW_AVX512_CORE_TARGET __m512i corner_columns() { return _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30); }

// The left (even) and right (odd) values of the 16 windows whose top-left corners are row[0, 2,
// ..., 30], the first n windows' only (the rest read nothing: masked loads do not fault).
FLOW_AVX512_CORE_TARGET void load_pairs(const float* row, int64_t n, __m512& left, __m512& right) {
  const __m512 low = _mm512_maskz_loadu_ps(first_lanes(std::min<int64_t>(2 * n, 16)), row);
  const __m512 high = _mm512_maskz_loadu_ps(first_lanes(std::max<int64_t>(2 * n - 16, 0)), row + 16);
  const __m512i even = corner_columns();
  left = _mm512_permutex2var_ps(low, even, high);
  right = _mm512_permutex2var_ps(low, _mm512_add_epi32(even, _mm512_set1_epi32(1)), high);
}
// A bfloat16 pair is one 32-bit lane: the left value in its low half, the right in its high half,
// each a float32's high half (exact).
FLOW_AVX512_CORE_TARGET void load_pairs(const BFloat16* row, int64_t n, __m512& left, __m512& right) {
  const __m512i pairs = _mm512_maskz_loadu_epi32(first_lanes(n), row);
  left = _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16));
  right = _mm512_castsi512_ps(_mm512_and_si512(pairs, _mm512_set1_epi32(static_cast<int32_t>(0xFFFF0000u))));
}

FLOW_AVX512_CORE_TARGET void store_first(float* out, int64_t n, __m512 v) { _mm512_mask_storeu_ps(out, first_lanes(n), v); }
// v holds loaded values (a selection computes nothing new), so their high halves are exact.
FLOW_AVX512_CORE_TARGET void store_first(BFloat16* out, int64_t n, __m512 v) {
  _mm256_mask_storeu_epi16(out, first_lanes(n), _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(v), 16)));
}

// One step of the window scan on 16 windows: v (at `offset` in its window) replaces the best when
// larger, or when NaN and the best is not, as max_pool_window's visit.
FLOW_AVX512_CORE_TARGET void visit(__m512& best, __m512i& best_offset, __m512 v, __m512i offset) {
  const __mmask16 take = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) |
                         (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & _mm512_cmp_ps_mask(best, best, _CMP_ORD_Q));
  best = _mm512_mask_mov_ps(best, take, v);
  best_offset = _mm512_mask_mov_epi32(best_offset, take, offset);
}

template <typename T>
FLOW_AVX512_CORE_TARGET void row_2x2(const PoolGeometry& g, const T* src, int64_t row, int64_t x0, int64_t end, T* out_row, int64_t* index_row) {
  const auto w = static_cast<int32_t>(g.w);
  const __m512i right_offset = _mm512_set1_epi32(1), below = _mm512_set1_epi32(w), diagonal = _mm512_set1_epi32(w + 1);
  const T* top = src + row * g.w;
  for (; x0 < end; x0 += 16) {
    const int64_t n = std::min<int64_t>(16, end - x0), column = x0 * 2 - g.pw;
    __m512 top_left, top_right, bottom_left, bottom_right;
    load_pairs(top + column, n, top_left, top_right);
    load_pairs(top + column + g.w, n, bottom_left, bottom_right);
    __m512 best = top_left;
    __m512i offset = _mm512_setzero_si512();
    visit(best, offset, top_right, right_offset);
    visit(best, offset, bottom_left, below);
    visit(best, offset, bottom_right, diagonal);
    store_first(out_row + x0, n, best);
    if (index_row == nullptr) continue;
    const __m512i index = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(row * g.w + column)), _mm512_add_epi32(corner_columns(), offset));
    const auto mask = first_lanes(n);
    _mm512_mask_storeu_epi64(index_row + x0, static_cast<__mmask8>(mask), _mm512_cvtepi32_epi64(_mm512_castsi512_si256(index)));
    _mm512_mask_storeu_epi64(index_row + x0 + 8, static_cast<__mmask8>(mask >> 8), _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(index, 1)));
  }
}

// The first n (0-16) output gradients of a row as float32 lanes, -0 made +0: the scatter adds each
// to a +0 (max_pool_grad_scatter), which gives +0 for -0 and keeps every other value's bits.
FLOW_AVX512_CORE_TARGET __m512 load_grads(const float* dy, int64_t n) {
  return _mm512_add_ps(_mm512_maskz_loadu_ps(first_lanes(n), dy), _mm512_setzero_ps());
}
FLOW_AVX512_CORE_TARGET __m512 load_grads(const BFloat16* dy, int64_t n) {
  const __m512i bits = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(first_lanes(n), dy)), 16);
  const __m512i negative_zero = _mm512_set1_epi32(static_cast<int32_t>(0x80000000u));
  return _mm512_castsi512_ps(_mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(bits, negative_zero), _mm512_setzero_si512()));
}

// Writes one input row of 16 windows: lane j's left input (row[2j]) gets v's lane where `left`
// has it, its right input where `right` has it, +0 elsewhere; the first n windows only.
FLOW_AVX512_CORE_TARGET void store_pairs(float* row, int64_t n, __m512 v, __mmask16 left, __mmask16 right) {
  const __m512 lefts = _mm512_maskz_mov_ps(left, v), rights = _mm512_maskz_mov_ps(right, v);
  const __m512i low = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  _mm512_mask_storeu_ps(row, first_lanes(std::min<int64_t>(2 * n, 16)), _mm512_permutex2var_ps(lefts, low, rights));
  _mm512_mask_storeu_ps(row + 16, first_lanes(std::max<int64_t>(2 * n - 16, 0)),
                        _mm512_permutex2var_ps(lefts, _mm512_add_epi32(low, _mm512_set1_epi32(8)), rights));
}
FLOW_AVX512_CORE_TARGET void store_pairs(BFloat16* row, int64_t n, __m512 v, __mmask16 left, __mmask16 right) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i pairs = _mm512_or_si512(_mm512_maskz_mov_epi32(left, _mm512_srli_epi32(bits, 16)), _mm512_maskz_mov_epi32(right, bits));
  _mm512_mask_storeu_epi32(row, first_lanes(n), pairs);
}

template <typename T>
FLOW_AVX512_CORE_TARGET bool grad_plane_2x2(const PoolGeometry& g, const T* dy, const int64_t* indices, T* dx) {
  const auto w = static_cast<int32_t>(g.w);
  const __m512i right = _mm512_set1_epi32(1), below = _mm512_set1_epi32(w), diagonal = _mm512_set1_epi32(w + 1);
  for (int64_t y = 0; y < g.oh; ++y) {
    T* top = dx + 2 * y * g.w;
    for (int64_t x0 = 0; x0 < g.ow; x0 += 16) {
      const int64_t n = std::min<int64_t>(16, g.ow - x0), o = y * g.ow + x0;
      const __mmask16 lanes = first_lanes(n);
      // Saturated to int32: an index past int32 cannot pass for one in its window.
      const __m256i low = _mm512_cvtsepi64_epi32(_mm512_maskz_loadu_epi64(static_cast<__mmask8>(lanes), indices + o));
      const __m256i high = _mm512_cvtsepi64_epi32(_mm512_maskz_loadu_epi64(static_cast<__mmask8>(lanes >> 8), indices + o + 8));
      const __m512i corner = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(2 * y * g.w + 2 * x0)), corner_columns());
      const __m512i offset = _mm512_sub_epi32(_mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1), corner);
      const __mmask16 top_left = _mm512_cmpeq_epi32_mask(offset, _mm512_setzero_si512()), top_right = _mm512_cmpeq_epi32_mask(offset, right);
      const __mmask16 bottom_left = _mm512_cmpeq_epi32_mask(offset, below), bottom_right = _mm512_cmpeq_epi32_mask(offset, diagonal);
      if (((top_left | top_right | bottom_left | bottom_right) & lanes) != lanes) return false;
      const __m512 v = load_grads(dy + o, n);
      store_pairs(top + 2 * x0, n, v, top_left, top_right);
      store_pairs(top + g.w + 2 * x0, n, v, bottom_left, bottom_right);
    }
    if (g.w % 2 != 0) top[g.w - 1] = top[2 * g.w - 1] = T(0);
  }
  std::fill(dx + 2 * g.oh * g.w, dx + g.plane_in(), T(0));
  return true;
}

}  // namespace

void max_pool_row_2x2_avx512(const PoolGeometry& g, const float* src, int64_t row, int64_t x0, int64_t end, float* out_row,
                             int64_t* index_row) {
  row_2x2(g, src, row, x0, end, out_row, index_row);
}

void max_pool_row_2x2_avx512(const PoolGeometry& g, const BFloat16* src, int64_t row, int64_t x0, int64_t end, BFloat16* out_row,
                             int64_t* index_row) {
  row_2x2(g, src, row, x0, end, out_row, index_row);
}

bool max_pool_grad_plane_2x2_avx512(const PoolGeometry& g, const float* dy, const int64_t* indices, float* dx) {
  return grad_plane_2x2(g, dy, indices, dx);
}

bool max_pool_grad_plane_2x2_avx512(const PoolGeometry& g, const BFloat16* dy, const int64_t* indices, BFloat16* dx) {
  return grad_plane_2x2(g, dy, indices, dx);
}

}  // namespace flow::cpu
