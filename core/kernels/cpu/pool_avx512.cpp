// max_pool_row_2x2 (pool_loop.h) with AVX-512, 16 windows at a time, for CPUs that have it. The
// rows of the usual pools are short (13 or 5 outputs on the LeNet pools): the AVX2 loop runs them
// as a part of 8 windows whose outputs go through the stack, where masked loads and stores take
// any part here. Only these functions are compiled for AVX-512 (a target attribute, as in
// fused.cpp), so nothing AVX-512 is shared with other files.
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

#define FLOW_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

// The first n (0-16) lanes.
FLOW_AVX512_TARGET __mmask16 first_lanes(int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

// The left (even) and right (odd) values of the 16 windows whose top-left corners are row[0, 2,
// ..., 30], the first n windows' only (the rest read nothing: masked loads do not fault).
FLOW_AVX512_TARGET void load_pairs(const float* row, int64_t n, __m512& left, __m512& right) {
  const __m512 low = _mm512_maskz_loadu_ps(first_lanes(std::min<int64_t>(2 * n, 16)), row);
  const __m512 high = _mm512_maskz_loadu_ps(first_lanes(std::max<int64_t>(2 * n - 16, 0)), row + 16);
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  left = _mm512_permutex2var_ps(low, even, high);
  right = _mm512_permutex2var_ps(low, _mm512_add_epi32(even, _mm512_set1_epi32(1)), high);
}
// A bfloat16 pair is one 32-bit lane: the left value in its low half, the right in its high half,
// each a float32's high half (exact).
FLOW_AVX512_TARGET void load_pairs(const BFloat16* row, int64_t n, __m512& left, __m512& right) {
  const __m512i pairs = _mm512_maskz_loadu_epi32(first_lanes(n), row);
  left = _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16));
  right = _mm512_castsi512_ps(_mm512_and_si512(pairs, _mm512_set1_epi32(static_cast<int32_t>(0xFFFF0000u))));
}

FLOW_AVX512_TARGET void store_first(float* out, int64_t n, __m512 v) { _mm512_mask_storeu_ps(out, first_lanes(n), v); }
// v holds loaded values (a selection computes nothing new), so their high halves are exact.
FLOW_AVX512_TARGET void store_first(BFloat16* out, int64_t n, __m512 v) {
  _mm256_mask_storeu_epi16(out, first_lanes(n), _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(v), 16)));
}

// One step of the window scan on 16 windows: v (at `offset` in its window) replaces the best when
// larger, or when NaN and the best is not, as max_pool_window's visit.
FLOW_AVX512_TARGET void visit(__m512& best, __m512i& best_offset, __m512 v, __m512i offset) {
  const __mmask16 take = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) |
                         (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & _mm512_cmp_ps_mask(best, best, _CMP_ORD_Q));
  best = _mm512_mask_mov_ps(best, take, v);
  best_offset = _mm512_mask_mov_epi32(best_offset, take, offset);
}

template <typename T>
FLOW_AVX512_TARGET void row_2x2(const PoolGeometry& g, const T* src, int64_t row, int64_t x0, int64_t end, T* out_row, int64_t* index_row) {
  const auto w = static_cast<int32_t>(g.w);
  const __m512i right_offset = _mm512_set1_epi32(1), below = _mm512_set1_epi32(w), diagonal = _mm512_set1_epi32(w + 1);
  const __m512i lane_columns = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
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
    const __m512i index = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(row * g.w + column)), _mm512_add_epi32(lane_columns, offset));
    const auto mask = first_lanes(n);
    _mm512_mask_storeu_epi64(index_row + x0, static_cast<__mmask8>(mask), _mm512_cvtepi32_epi64(_mm512_castsi512_si256(index)));
    _mm512_mask_storeu_epi64(index_row + x0 + 8, static_cast<__mmask8>(mask >> 8), _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(index, 1)));
  }
}

#undef FLOW_AVX512_TARGET

}  // namespace

bool has_avx512_pooling() { return dnnl_util::has_avx512_core(); }

void max_pool_row_2x2_avx512(const PoolGeometry& g, const float* src, int64_t row, int64_t x0, int64_t end, float* out_row,
                             int64_t* index_row) {
  row_2x2(g, src, row, x0, end, out_row, index_row);
}

void max_pool_row_2x2_avx512(const PoolGeometry& g, const BFloat16* src, int64_t row, int64_t x0, int64_t end, BFloat16* out_row,
                             int64_t* index_row) {
  row_2x2(g, src, row, x0, end, out_row, index_row);
}

}  // namespace flow::cpu
