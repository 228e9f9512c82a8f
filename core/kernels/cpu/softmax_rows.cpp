// The AVX-512 rows of softmax_rows.h. Only these functions are compiled for AVX-512
// (FLOW_AVX512_CORE_TARGET, as in pool_avx512.cpp); each mirrors a loop of softmax.cpp operation
// by operation: -ffp-contract=off keeps the compiler from fusing the scalar loops' multiply-adds,
// and these use no fused multiply-add either.
#include "core/kernels/cpu/softmax_rows.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <type_traits>

// GCC 12 warns on its own AVX-512 intrinsics here: they start from _mm512_undefined_*(), whose
// self-initialisation it reports as (maybe) uninitialized once they are inlined into these functions.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include "core/kernels/cpu/dnnl_util.h"

namespace flow::cpu::avx512 {
namespace {

constexpr __mmask16 kAll = 0xFFFF;

// The first n (0-16) lanes.
FLOW_AVX512_CORE_TARGET __mmask16 first_lanes(int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

// Masked-off lanes read as 0 (and nothing: masked loads do not fault).
FLOW_AVX512_CORE_TARGET __m512 load(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
FLOW_AVX512_CORE_TARGET __m512 load(const BFloat16* p, __mmask16 m) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

// Whole vectors are stored unmasked (m == kAll folds where the loops inline these): AMD's Zen 4
// runs masked stores far slower.
FLOW_AVX512_CORE_TARGET void store(float* p, __mmask16 m, __m512 v) {
  if (m == kAll) _mm512_storeu_ps(p, v);
  else _mm512_mask_storeu_ps(p, m, v);
}
// BFloat16(float)'s rounding: to nearest even, NaN as the quiet NaN 0x7fc0. The high halves are
// gathered by a word permute: the narrowing store (vpmovdw to memory) is slow on AMD's Zen 4.
FLOW_AVX512_CORE_TARGET void store(BFloat16* p, __mmask16 m, __m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i rounded = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd));
  rounded = _mm512_mask_mov_epi32(rounded, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_epi32(0x7fc00000));
  const __m512i high_halves = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  const __m256i bits = _mm512_castsi512_si256(_mm512_permutexvar_epi16(high_halves, rounded));
  if (m == kAll) _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), bits);
  else _mm256_mask_storeu_epi16(p, m, bits);
}

FLOW_AVX512_CORE_TARGET __m512 splat(float v) { return _mm512_set1_ps(v); }

// math::exp_float, 16 lanes (inlined: a call per vector spills the registers).
[[gnu::always_inline]] FLOW_AVX512_CORE_TARGET inline __m512 exp16(__m512 x) {
  const __mmask16 is_nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  const __mmask16 underflows = _mm512_cmp_ps_mask(x, splat(-86.0f), _CMP_LT_OQ);
  const __mmask16 overflows = _mm512_cmp_ps_mask(x, splat(88.7f), _CMP_GT_OQ);
  __m512 clamped = _mm512_mask_mov_ps(x, is_nan, _mm512_setzero_ps());
  clamped = _mm512_mask_mov_ps(clamped, underflows, splat(-86.0f));
  clamped = _mm512_mask_mov_ps(clamped, overflows, splat(88.7f));
  const __m512 shift = splat(12582912.0f);
  const __m512 k = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(clamped, splat(1.44269504088896341f)), shift), shift);
  const __m512 r = _mm512_sub_ps(_mm512_sub_ps(clamped, _mm512_mul_ps(k, splat(0.693359375f))), _mm512_mul_ps(k, splat(-2.12194440e-4f)));
  __m512 p = _mm512_add_ps(_mm512_mul_ps(r, splat(1.0f / 5040)), splat(1.0f / 720));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), splat(1.0f / 120));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), splat(1.0f / 24));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), splat(1.0f / 6));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), splat(0.5f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), splat(1.0f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), splat(1.0f));
  const __m512 scale = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(k), _mm512_set1_epi32(126)), 23));
  __m512 result = _mm512_mul_ps(_mm512_mul_ps(p, scale), splat(2.0f));
  result = _mm512_mask_mov_ps(result, underflows, _mm512_setzero_ps());
  result = _mm512_mask_mov_ps(result, overflows, splat(std::numeric_limits<float>::infinity()));
  return _mm512_mask_mov_ps(result, is_nan, x);
}

// softmax.cpp's blocked_sum: term(j, mask) gives elements j..j+15 (the masked ones only).
template <typename Term>
FLOW_AVX512_CORE_TARGET double blocked_sum(int64_t n, Term term) {
  double total = 0;
  alignas(64) std::array<float, kSoftmaxLanes> lanes;
  for (int64_t start = 0; start < n; start += kSoftmaxBlock) {
    const int64_t stop = std::min(n, start + kSoftmaxBlock);
    __m512 sum = _mm512_setzero_ps();
    int64_t j = start;
    for (; j + kSoftmaxLanes <= stop; j += kSoftmaxLanes) sum = _mm512_add_ps(sum, term(j, kAll));
    if (j < stop) {
      const __mmask16 m = first_lanes(stop - j);
      sum = _mm512_mask_add_ps(sum, m, sum, term(j, m));
    }
    _mm512_store_ps(lanes.data(), sum);
    for (const float lane : lanes) total += static_cast<double>(lane);
  }
  return total;
}

// The row's largest element as contiguous_row finds it: lanes, their first largest, then the tail.
template <typename In>
FLOW_AVX512_CORE_TARGET float row_max(const In* x, int64_t n) {
  __m512 lanes = splat(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + kSoftmaxLanes <= n; i += kSoftmaxLanes) lanes = _mm512_max_ps(load(x + i, kAll), lanes);
  alignas(64) std::array<float, kSoftmaxLanes> values;
  _mm512_store_ps(values.data(), lanes);
  float max_value = *std::max_element(values.begin(), values.end());
  for (; i < n; ++i) max_value = std::max(max_value, static_cast<float>(x[i]));
  return std::isinf(max_value) ? 0.0f : max_value;
}

// body(j, mask) over the row's vectors of 16 elements, the last one masked to the row's end.
template <typename Body>
FLOW_AVX512_CORE_TARGET void for_each_vector(int64_t n, Body body) {
  int64_t j = 0;
  for (; j + kSoftmaxLanes <= n; j += kSoftmaxLanes) body(j, kAll);
  if (j < n) body(j, first_lanes(n - j));
}

// log_softmax's statistics of a row: its max (row_max) and the log of the blocked sum of
// exp(x - max).
template <typename In>
FLOW_AVX512_CORE_TARGET void statistics_row(const In* x, int64_t n, float* max_out, float* log_total_out) {
  const float max_value = row_max(x, n);
  const __m512 max_vector = splat(max_value);
  *max_out = max_value;
  *log_total_out = static_cast<float>(
      std::log(blocked_sum(n, [&](int64_t j, __mmask16 m) FLOW_AVX512_CORE_TARGET { return exp16(_mm512_sub_ps(load(x + j, m), max_vector)); })));
}

template <bool log_output, typename In, typename Out>
FLOW_AVX512_CORE_TARGET void row(const In* x, Out* y, int64_t n) {
  if constexpr (log_output) {
    float max_scalar = 0, log_total_scalar = 0;
    statistics_row(x, n, &max_scalar, &log_total_scalar);
    const __m512 max_value = splat(max_scalar), log_total = splat(log_total_scalar);
    for_each_vector(n, [&](int64_t j, __mmask16 m) FLOW_AVX512_CORE_TARGET {
      store(y + j, m, _mm512_sub_ps(_mm512_sub_ps(load(x + j, m), max_value), log_total));
    });
    return;
  }
  const __m512 max_value = splat(row_max(x, n));
  auto shifted_exp = [&](int64_t j, __mmask16 m) FLOW_AVX512_CORE_TARGET { return exp16(_mm512_sub_ps(load(x + j, m), max_value)); };
  if constexpr (std::is_same_v<Out, float>) {
    for_each_vector(n, [&](int64_t j, __mmask16 m) FLOW_AVX512_CORE_TARGET { store(y + j, m, shifted_exp(j, m)); });
    const __m512 scale = splat(static_cast<float>(1.0 / blocked_sum(n, [&](int64_t j, __mmask16 m) FLOW_AVX512_CORE_TARGET { return load(y + j, m); })));
    for_each_vector(n, [&](int64_t j, __mmask16 m) FLOW_AVX512_CORE_TARGET { store(y + j, m, _mm512_mul_ps(load(y + j, m), scale)); });
  } else {
    const __m512 scale = splat(static_cast<float>(1.0 / blocked_sum(n, shifted_exp)));
    for_each_vector(n, [&](int64_t j, __mmask16 m) FLOW_AVX512_CORE_TARGET { store(y + j, m, _mm512_mul_ps(shifted_exp(j, m), scale)); });
  }
}

template <bool log_output, typename T, typename R>
FLOW_AVX512_CORE_TARGET void grad_row(const T* g, const T* y, R* r, int64_t n) {
  if constexpr (log_output) {
    const __m512 total = splat(static_cast<float>(blocked_sum(n, [&](int64_t i, __mmask16 m) FLOW_AVX512_CORE_TARGET { return load(g + i, m); })));
    for_each_vector(n, [&](int64_t i, __mmask16 m) FLOW_AVX512_CORE_TARGET {
      store(r + i, m, _mm512_sub_ps(load(g + i, m), _mm512_mul_ps(exp16(load(y + i, m)), total)));
    });
  } else {
    const __m512 total = splat(static_cast<float>(
        blocked_sum(n, [&](int64_t i, __mmask16 m) FLOW_AVX512_CORE_TARGET { return _mm512_mul_ps(load(g + i, m), load(y + i, m)); })));
    for_each_vector(n, [&](int64_t i, __mmask16 m) FLOW_AVX512_CORE_TARGET {
      store(r + i, m, _mm512_mul_ps(load(y + i, m), _mm512_sub_ps(load(g + i, m), total)));
    });
  }
}

template <typename In>
FLOW_AVX512_CORE_TARGET void softmax_scaled_row(const In* x, float max_value, float log_total, float scale, In* r, int64_t n) {
  const __m512 max_vector = splat(max_value), log_total_vector = splat(log_total), scale_vector = splat(scale);
  for_each_vector(n, [&](int64_t j, __mmask16 m) FLOW_AVX512_CORE_TARGET {
    const __m512 log_probability = _mm512_sub_ps(_mm512_sub_ps(load(x + j, m), max_vector), log_total_vector);
    store(r + j, m, _mm512_mul_ps(exp16(log_probability), scale_vector));
  });
}

// softmax_scaled_row for bfloat16 with AVX512-BF16, 32 elements at a time: one 64-byte load
// widened by two word unpacks (each lane of 128 bits gives its low four words to one vector and its
// high four to the other), and the CPU's own rounding of both results (vcvtne2ps2bf16) put back in
// order by one word permute, where the portable store takes seven operations per 16 elements. The
// CPU's rounding flushes denormals and keeps NaN payloads, so a pair holding a denormal or a NaN
// takes BFloat16(float) instead: the bits are those of softmax_scaled_row. 1024 x 50257 on one Zen 4
// core: 18.6 ms, against 25 ms for softmax_scaled_row and 17.7 ms for its float32 form.
FLOW_AVX512_BF16_TARGET void softmax_scaled_row_bf16(const BFloat16* x, float max_value, float log_total, float scale, BFloat16* r,
                                                     int64_t n) {
  const __m512 max_vector = splat(max_value), log_total_vector = splat(log_total), scale_vector = splat(scale);
  auto scaled = [&](__m512 values) FLOW_AVX512_CORE_TARGET {
    return _mm512_mul_ps(exp16(_mm512_sub_ps(_mm512_sub_ps(values, max_vector), log_total_vector)), scale_vector);
  };
  // Word w of the output is word w % 8 < 4 ? (w / 8) * 4 + w % 8 : 16 + (w / 8) * 4 + w % 8 - 4 of
  // the pair converted (low 16 words: the unpacked low halves, high 16: the high halves).
  const __m512i order = _mm512_set_epi16(31, 30, 29, 28, 15, 14, 13, 12, 27, 26, 25, 24, 11, 10, 9, 8, 23, 22, 21, 20, 7, 6, 5, 4, 19, 18,
                                         17, 16, 3, 2, 1, 0);
  constexpr int kDenormalOrNaN = 0x01 | 0x20 | 0x80;  // fpclass: quiet NaN, denormal, signaling NaN
  int64_t j = 0;
  for (; j + 2 * kSoftmaxLanes <= n; j += 2 * kSoftmaxLanes) {
    const __m512i words = _mm512_loadu_si512(x + j);
    const __m512 low = scaled(_mm512_castsi512_ps(_mm512_unpacklo_epi16(_mm512_setzero_si512(), words)));
    const __m512 high = scaled(_mm512_castsi512_ps(_mm512_unpackhi_epi16(_mm512_setzero_si512(), words)));
    if ((_mm512_fpclass_ps_mask(low, kDenormalOrNaN) | _mm512_fpclass_ps_mask(high, kDenormalOrNaN)) != 0) {
      alignas(64) float values[2 * kSoftmaxLanes];
      _mm512_store_ps(values, low);
      _mm512_store_ps(values + kSoftmaxLanes, high);
      for (int64_t w = 0; w < 2 * kSoftmaxLanes; ++w) {
        const int64_t lane = w / 8, word = w % 8;
        r[j + w] = BFloat16(values[word < 4 ? lane * 4 + word : kSoftmaxLanes + lane * 4 + word - 4]);
      }
      continue;
    }
    const __m512i rounded = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(high, low));
    _mm512_storeu_si512(r + j, _mm512_permutexvar_epi16(order, rounded));
  }
  for_each_vector(n - j, [&](int64_t i, __mmask16 m) FLOW_AVX512_CORE_TARGET { store(r + j + i, m, scaled(load(x + j + i, m))); });
}

}  // namespace

// The entry points have no target attribute: GCC would take a target on a redeclaration for
// another version of the function (function multiversioning).
template <bool log_output, typename In, typename Out>
void softmax_row(const In* x, Out* y, int64_t n) {
  row<log_output>(x, y, n);
}

template <bool log_output, typename T, typename R>
void softmax_grad_row(const T* g, const T* y, R* r, int64_t n) {
  grad_row<log_output>(g, y, r, n);
}

template <typename In>
void log_sum_exp_row(const In* x, int64_t n, float* max_value, float* log_total) {
  statistics_row(x, n, max_value, log_total);
}

template <typename In>
void cross_entropy_grad_row(const In* x, float max_value, float log_total, float scale, In* r, int64_t n) {
  if constexpr (std::is_same_v<In, BFloat16>) {
    if (dnnl_util::has_avx512_bf16()) return softmax_scaled_row_bf16(x, max_value, log_total, scale, r, n);
  }
  softmax_scaled_row(x, max_value, log_total, scale, r, n);
}

template void log_sum_exp_row<float>(const float*, int64_t, float*, float*);
template void log_sum_exp_row<BFloat16>(const BFloat16*, int64_t, float*, float*);
template void cross_entropy_grad_row<float>(const float*, float, float, float, float*, int64_t);
template void cross_entropy_grad_row<BFloat16>(const BFloat16*, float, float, float, BFloat16*, int64_t);

// Every float/bfloat16 pair: softmax.cpp's dtype dispatch instantiates its callers for each.
template void softmax_row<false, float, float>(const float*, float*, int64_t);
template void softmax_row<true, float, float>(const float*, float*, int64_t);
template void softmax_row<false, float, BFloat16>(const float*, BFloat16*, int64_t);
template void softmax_row<true, float, BFloat16>(const float*, BFloat16*, int64_t);
template void softmax_row<false, BFloat16, float>(const BFloat16*, float*, int64_t);
template void softmax_row<true, BFloat16, float>(const BFloat16*, float*, int64_t);
template void softmax_row<false, BFloat16, BFloat16>(const BFloat16*, BFloat16*, int64_t);
template void softmax_row<true, BFloat16, BFloat16>(const BFloat16*, BFloat16*, int64_t);
template void softmax_grad_row<false, float, float>(const float*, const float*, float*, int64_t);
template void softmax_grad_row<true, float, float>(const float*, const float*, float*, int64_t);
template void softmax_grad_row<false, float, BFloat16>(const float*, const float*, BFloat16*, int64_t);
template void softmax_grad_row<true, float, BFloat16>(const float*, const float*, BFloat16*, int64_t);
template void softmax_grad_row<false, BFloat16, float>(const BFloat16*, const BFloat16*, float*, int64_t);
template void softmax_grad_row<true, BFloat16, float>(const BFloat16*, const BFloat16*, float*, int64_t);
template void softmax_grad_row<false, BFloat16, BFloat16>(const BFloat16*, const BFloat16*, BFloat16*, int64_t);
template void softmax_grad_row<true, BFloat16, BFloat16>(const BFloat16*, const BFloat16*, BFloat16*, int64_t);

}  // namespace flow::cpu::avx512
