// CPU kernels of flash_attention and flash_attention_grad (the FlashAttention-2 algorithm).
// Forward: per (batch element, tile of query rows), key tiles are visited in order with an
// online softmax (running row max and sum, the accumulator rescaled when the max grows), so the
// scores exist one tile at a time. Backward: per batch element, for each key tile, every query
// tile that sees it recomputes its scores from the saved log-sum-exp and adds to the gradients.
// Tile products go to oneDNN or BLAS (single-threaded inside flow's parallel regions); the softmax
// is computed in float32 (float64 for float64 inputs). Dropout of the weights (flash_attention_dropout)
// is drawn per weight from Philox counters, the same in forward and backward.
#include <cblas.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/half.h"
#include "core/kernels/cpu/elementwise_math.h"
#include "core/kernels/cpu/matmul.h"
#include "core/op.h"
#include "core/ops/copy.h"
#include "core/random.h"
#include "core/thread_pool.h"

namespace flow::cpu {
namespace {

constexpr int64_t kQueryTile = 64;
constexpr int64_t kKeyTile = 64;

template <typename C, typename T>
C to_compute(T x) {
  if constexpr (std::is_arithmetic_v<T>) {
    return static_cast<C>(x);
  } else {
    return static_cast<C>(static_cast<float>(x));  // the 16-bit storage types convert through float
  }
}

// n elements of T as the compute type C: the data itself when T is C, else a converted copy in buf.
template <typename C, typename T>
const C* as_compute(const T* data, int64_t n, std::vector<C>& buf) {
  if constexpr (std::is_same_v<C, T>) {
    return data;
  } else {
    buf.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) buf[static_cast<size_t>(i)] = to_compute<C>(data[i]);
    return buf.data();
  }
}

// Row-major C = alpha * op(A) @ op(B) + beta * C, beta 0 or 1, A and B in the operand type O,
// C in the compute type. float32 and bfloat16 operands go to oneDNN's brgemm kernels where this CPU
// has them (a 64x64x64 tile on one Zen 4 core: 2.1 us in bfloat16, 3.0 us in float32, 4.9 us through
// OpenBLAS), else to BLAS. Leading dims are at least 1, as BLAS requires even of empty operands.
int ld(int64_t value) { return static_cast<int>(std::max<int64_t>(1, value)); }
void blas_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
               int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a, ld(lda), b, ld(ldb), beta, c, ld(ldc));
}
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda, const double* b,
          int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a, ld(lda), b, ld(ldb), beta, c, ld(ldc));
}
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
          int64_t ldb, float beta, float* c, int64_t ldc) {
  if (!onednn_tile_product(kFloat32, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) {
    blas_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}
// Where oneDNN refuses a shape its bfloat16 operands are widened and multiplied in float32.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a, int64_t lda, const BFloat16* b,
          int64_t ldb, float beta, float* c, int64_t ldc) {
  if (onednn_tile_product(kBFloat16, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) return;
  thread_local std::vector<float> wide_a, wide_b;
  // The elements from the first row's start to the last row's end, leading dims included.
  auto span = [](int64_t rows, int64_t cols, int64_t ld) { return rows == 0 || cols == 0 ? 0 : (rows - 1) * ld + cols; };
  const float* a_wide = as_compute<float>(a, span(trans_a ? k : m, trans_a ? m : k, lda), wide_a);
  const float* b_wide = as_compute<float>(b, span(trans_b ? n : k, trans_b ? k : n, ldb), wide_b);
  blas_gemm(trans_a, trans_b, m, n, k, alpha, a_wide, lda, b_wide, ldb, beta, c, ldc);
}

// Whether oneDNN multiplies bfloat16 tiles natively here (AVX512-BF16, AMX): then bfloat16
// attention multiplies its operands as they are, and the softmax weights and their gradient rounded
// to bfloat16, as PyTorch's CPU kernel does; elsewhere every operand is widened to float32.
bool bfloat16_products() {
  static const bool native = [] {
    const std::vector<BFloat16> a(64 * 64, BFloat16(1.0f));
    std::vector<float> c(64 * 64);
    return onednn_tile_product(kBFloat16, false, true, 64, 64, 64, 1.0f, a.data(), 64, a.data(), 64, 0.0f, c.data(), 64);
  }();
  return native;
}

template <typename T, typename C>
void store(const C* values, int64_t n, T* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(values[i]);
}

// n computed values as tile-product operands of type O: the values themselves when O is C, else
// rounded into buf.
template <typename O, typename C>
const O* as_operands(const C* values, int64_t n, O* buf) {
  if constexpr (std::is_same_v<O, C>) {
    return values;
  } else {
    store(values, n, buf);
    return buf;
  }
}

// Reductions over a row in kLanes independent partial results, which the compiler vectorises (one
// running max or sum is a serial chain it must keep in order: a third of the forward's time).
constexpr int64_t kLanes = 16;
template <typename C, typename Load, typename Combine>
C lane_reduce(int64_t n, C init, Load load, Combine combine) {
  C lanes[kLanes];
  std::fill(lanes, lanes + kLanes, init);
  int64_t x = 0;
  for (; x + kLanes <= n; x += kLanes) {
    for (int64_t lane = 0; lane < kLanes; ++lane) lanes[lane] = combine(lanes[lane], load(x + lane));
  }
  C result = init;
  for (; x < n; ++x) result = combine(result, load(x));
  for (int64_t lane = 0; lane < kLanes; ++lane) result = combine(result, lanes[lane]);
  return result;
}
template <typename C>
C max_of(const C* values, int64_t n) {
  return lane_reduce<C>(n, -std::numeric_limits<C>::infinity(), [&](int64_t x) { return values[x]; },
                        [](C a, C b) { return std::max(a, b); });
}
template <typename C>
C sum_of(const C* values, int64_t n) {
  return lane_reduce<C>(n, C(0), [&](int64_t x) { return values[x]; }, std::plus<C>());
}
template <typename C, typename T>
C dot_of(const T* a, const T* b, int64_t n) {
  return lane_reduce<C>(n, C(0), [&](int64_t x) { return to_compute<C>(a[x]) * to_compute<C>(b[x]); }, std::plus<C>());
}

// Element offsets of each batch element's matrix (the last two dims) of t, over the flattened
// batch dims of any strides.
std::vector<int64_t> batch_offsets(const Tensor& t) {
  const int64_t n = t.dim();
  int64_t batch = 1;
  for (int64_t d = 0; d < n - 2; ++d) batch *= t.size(d);
  std::vector<int64_t> offsets(static_cast<size_t>(batch), 0);
  for (int64_t b = 0; b < batch; ++b) {
    int64_t rest = b, offset = 0;
    for (int64_t d = n - 3; d >= 0; --d) {
      offset += (rest % t.size(d)) * t.stride(d);
      rest /= t.size(d);
    }
    offsets[static_cast<size_t>(b)] = offset;
  }
  return offsets;
}

// t itself when each batch element's matrix is contiguous (its batch dims may have any strides,
// as a KV cache narrowed to the positions in use has), else a contiguous copy.
Tensor with_contiguous_matrices(const Tensor& t) {
  const int64_t n = t.dim();
  const bool rows = t.size(n - 1) <= 1 || t.stride(n - 1) == 1;
  const bool matrix = t.size(n - 2) <= 1 || t.stride(n - 2) == t.size(n - 1);
  return rows && matrix ? t : detail::contiguous_copy(t);
}

// Shapes of one call: `batch` (L, E) x (S, E) x (S, Ev) problems, and where each one's additive
// mask starts (the mask broadcasts over batch dims, rows or columns where its size is 1).
struct Problem {
  int64_t batch = 1, l = 0, s = 0, e = 0, ev = 0;
  double scale = 1;
  bool causal = false;
  const Tensor* mask = nullptr;
  std::vector<int64_t> mask_offsets;  // per batch element
  int64_t mask_row_stride = 0, mask_col_stride = 0;

  Problem(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask_, const Attrs& attrs) : mask(mask_) {
    const int64_t n = q.dim();
    l = q.size(n - 2);
    e = q.size(n - 1);
    s = k.size(n - 2);
    ev = v.size(n - 1);
    for (int64_t d = 0; d < n - 2; ++d) batch *= q.size(d);
    scale = attrs.get<double>("scale");
    causal = attrs.get<bool>("is_causal");
    if (mask == nullptr) return;
    // The mask's strides over (batch..., L, S), 0 along the dims it broadcasts.
    std::vector<int64_t> strides(static_cast<size_t>(n), 0);
    int64_t stride = 1;
    for (int64_t d = mask->dim() - 1; d >= 0; --d) {
      const int64_t full = d + (n - mask->dim());
      if (mask->size(d) != 1) strides[static_cast<size_t>(full)] = stride;
      stride *= mask->size(d);
    }
    mask_row_stride = strides[static_cast<size_t>(n - 2)];
    mask_col_stride = strides[static_cast<size_t>(n - 1)];
    mask_offsets.assign(static_cast<size_t>(batch), 0);
    for (int64_t b = 0; b < batch; ++b) {
      int64_t rest = b, offset = 0;
      for (int64_t d = n - 3; d >= 0; --d) {
        offset += (rest % q.size(d)) * strides[static_cast<size_t>(d)];
        rest /= q.size(d);
      }
      mask_offsets[static_cast<size_t>(b)] = offset;
    }
  }
};

// Scores of query rows [i0, i0 + rows) against keys [j0, j0 + cols) of batch element b, scaled,
// masked: scores (rows x cols) = q_tile @ k_tile^T * scale + mask, -inf where causality hides a key.
template <typename C, typename T, typename O>
void tile_scores(const Problem& p, int64_t b, int64_t i0, int64_t rows, int64_t j0, int64_t cols, const O* q_tile, const O* k_tile,
                 C* scores) {
  gemm(false, true, rows, cols, p.e, static_cast<C>(p.scale), q_tile, p.e, k_tile, p.e, C(0), scores, cols);
  if (p.mask != nullptr) {
    const T* mask = static_cast<const T*>(p.mask->data_ptr()) + p.mask_offsets[static_cast<size_t>(b)];
    for (int64_t r = 0; r < rows; ++r) {
      const T* mask_row = mask + (i0 + r) * p.mask_row_stride;
      for (int64_t c = 0; c < cols; ++c) scores[r * cols + c] += to_compute<C>(mask_row[(j0 + c) * p.mask_col_stride]);
    }
  }
  if (p.causal) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = std::max<int64_t>(0, i0 + r + 1 - j0); c < cols; ++c) scores[r * cols + c] = -std::numeric_limits<C>::infinity();
    }
  }
}

// Dropout of attention weights from Philox counters: weight (b, i, j) of the (batch, L, S) weights
// is element e = (b * L + i) * S + j, read as word e % 4 of counter offset + e / 4; it is dropped
// when that word's uniform is below p, else scaled by 1 / (1 - p). Forward and backward read the
// same words.
struct Dropout {
  double p = 0;
  uint64_t seed = 0, offset = 0;
  bool active() const { return p > 0; }

  // scale[c] for keys j0 + c of query row i of batch element b: 0 or 1 / (1 - p).
  template <typename C>
  void row_scales(const Problem& problem, int64_t b, int64_t i, int64_t j0, int64_t cols, C* scale) const {
    const auto keep = static_cast<C>(1.0 / (1.0 - p));
    const auto first = static_cast<uint64_t>((b * problem.l + i) * problem.s + j0);
    uint32_t words[4];
    uint64_t block = std::numeric_limits<uint64_t>::max();
    for (int64_t c = 0; c < cols; ++c) {
      const uint64_t element = first + static_cast<uint64_t>(c);
      if (element / 4 != block) {
        block = element / 4;
        Philox::block(seed, offset + block, words);
      }
      scale[c] = Philox::to_unit(words[element % 4]) < p ? C(0) : keep;
    }
  }
};

// Keys [0, end) that query rows [i0, i0 + rows) may see.
int64_t visible_keys(const Problem& p, int64_t i0, int64_t rows) { return p.causal ? std::min(p.s, i0 + rows) : p.s; }

// At most this many query rows per batch element take the few-query path (decoding: one new token
// per row). BLAS packs every key and value tile it is handed, a cost the single query row of a
// decode step never earns back; direct dot products and weighted sums over the keys do not copy.
constexpr int64_t kFewQueries = 4;
// Multiply-adds below which a chunk of few-query batch elements is not worth a thread.
constexpr int64_t kFewQueryGrain = 1 << 16;

// sum_x a[x] * b[x] in the compute type, b converted from its storage type.
template <typename C, typename T>
[[gnu::always_inline]] inline C dot(const C* a, const T* b, int64_t n) {
  int64_t x = 0;
  C sum = 0;
#if defined(__AVX2__) && defined(__FMA__)
  if constexpr (std::is_same_v<C, float> && std::is_same_v<T, float>) {
    __m256 even = _mm256_setzero_ps(), odd = _mm256_setzero_ps();
    for (; x + 16 <= n; x += 16) {
      even = _mm256_fmadd_ps(_mm256_loadu_ps(a + x), _mm256_loadu_ps(b + x), even);
      odd = _mm256_fmadd_ps(_mm256_loadu_ps(a + x + 8), _mm256_loadu_ps(b + x + 8), odd);
    }
    const __m256 both = _mm256_add_ps(even, odd);
    const __m128 half = _mm_add_ps(_mm256_castps256_ps128(both), _mm256_extractf128_ps(both, 1));
    const __m128 quarter = _mm_add_ps(half, _mm_movehl_ps(half, half));
    sum = _mm_cvtss_f32(_mm_add_ss(quarter, _mm_movehdup_ps(quarter)));
  }
#endif
  for (; x < n; ++x) sum += a[x] * to_compute<C>(b[x]);  // the tail, or every element off the AVX2 path
  return sum;
}

// Query rows [0, p.l) of batch elements [begin, end), p.l <= kFewQueries: per row, the scores of
// every visible key by dot products, then softmax weights and their weighted sum of value rows.
// The same result as the tiled path up to float rounding (one softmax over all keys where the
// tiled one rescales per key tile).
template <typename T, typename C>
void few_query_rows(const Problem& p, const Dropout& dropout, int64_t begin, int64_t end, const T* q, const std::vector<int64_t>& q_at,
                    const T* k, const std::vector<int64_t>& k_at, const T* v, const std::vector<int64_t>& v_at, T* out,
                    C* lse) {
  // Grown to the largest call a thread has seen, then reused: no allocation per decode step.
  thread_local std::vector<C> query, scores, acc, keep;
  query.resize(static_cast<size_t>(p.e));
  scores.resize(static_cast<size_t>(p.s));
  acc.resize(static_cast<size_t>(p.ev));
  if (dropout.active()) keep.resize(static_cast<size_t>(p.s));
  const T* mask = p.mask != nullptr ? static_cast<const T*>(p.mask->data_ptr()) : nullptr;
  for (int64_t b = begin; b < end; ++b) {
    const auto at = static_cast<size_t>(b);
    const T* k_b = k + k_at[at];
    const T* v_b = v + v_at[at];
    for (int64_t i = 0; i < p.l; ++i) {
      const T* q_row = q + q_at[at] + i * p.e;
      for (int64_t x = 0; x < p.e; ++x) query[static_cast<size_t>(x)] = to_compute<C>(q_row[x]) * static_cast<C>(p.scale);
      const int64_t keys = visible_keys(p, i, 1);
      C* s = scores.data();
      if (mask != nullptr) {
        // A key the mask hides (-inf) is not read: a decode step over a whole cache skips the free
        // positions past each row's length, which are most of the memory traffic.
        const T* mask_row = mask + p.mask_offsets[at] + i * p.mask_row_stride;
        for (int64_t j = 0; j < keys; ++j) {
          const C bias = to_compute<C>(mask_row[j * p.mask_col_stride]);
          s[j] = bias == -std::numeric_limits<C>::infinity() ? bias : dot(query.data(), k_b + j * p.e, p.e) + bias;
        }
      } else {
        for (int64_t j = 0; j < keys; ++j) s[j] = dot(query.data(), k_b + j * p.e, p.e);
      }
      const C row_max = max_of(s, keys);
      T* out_row = out + (b * p.l + i) * p.ev;
      if (row_max == -std::numeric_limits<C>::infinity()) {  // a row that sees no key gives zeros
        std::fill(out_row, out_row + p.ev, static_cast<T>(C(0)));
        lse[b * p.l + i] = -std::numeric_limits<C>::infinity();
        continue;
      }
      // The exps in a loop of their own, which vectorises (math::exp); the sum after it.
      for (int64_t j = 0; j < keys; ++j) s[j] = math::exp(s[j] - row_max);
      const C total = sum_of(s, keys);
      // The total normalises all weights; only the kept ones (scaled) reach the output.
      if (dropout.active()) {
        dropout.row_scales(p, b, i, 0, keys, keep.data());
        for (int64_t j = 0; j < keys; ++j) s[j] *= keep[static_cast<size_t>(j)];
      }
      std::fill(acc.begin(), acc.end(), C(0));
      for (int64_t j = 0; j < keys; ++j) {
        const C weight = s[j];
        if (weight == C(0)) continue;  // masked (or dropped) keys add nothing
        const T* v_row = v_b + j * p.ev;
        for (int64_t x = 0; x < p.ev; ++x) acc[static_cast<size_t>(x)] += weight * to_compute<C>(v_row[x]);
      }
      const C inverse = C(1) / total;
      for (int64_t x = 0; x < p.ev; ++x) out_row[x] = static_cast<T>(acc[static_cast<size_t>(x)] * inverse);
      lse[b * p.l + i] = row_max + std::log(total);
    }
  }
}

// The forward op takes strided inputs: query, key and value are read in place when each batch
// element's matrix is contiguous (decoding reads a narrowed KV cache without copying it). Tile
// products multiply operands of type O (T itself, or widened to the compute type C).
template <typename T, typename C, typename O>
void forward(KernelContext& ctx) {
  const Tensor query = with_contiguous_matrices(ctx.inputs[0]), key = with_contiguous_matrices(ctx.inputs[1]),
               value = with_contiguous_matrices(ctx.inputs[2]);
  const Tensor mask_tensor = ctx.inputs.size() == 4 ? (ctx.inputs[3].is_contiguous() ? ctx.inputs[3] : detail::contiguous_copy(ctx.inputs[3]))
                                                    : Tensor();
  const Tensor* mask = mask_tensor.defined() ? &mask_tensor : nullptr;
  const Problem p(query, key, value, mask, ctx.attrs);
  const std::vector<int64_t> q_at = batch_offsets(query), k_at = batch_offsets(key), v_at = batch_offsets(value);
  const T* q = static_cast<const T*>(query.data_ptr());
  const T* k = static_cast<const T*>(key.data_ptr());
  const T* v = static_cast<const T*>(value.data_ptr());
  T* out = static_cast<T*>(ctx.outputs[0].data_ptr());
  auto* lse = static_cast<C*>(ctx.outputs[1].data_ptr());
  Dropout dropout;
  dropout.p = ctx.attrs.get<double>("dropout_p");
  if (dropout.active()) {
    dropout.seed = static_cast<uint64_t>(ctx.attrs.get<int64_t>("seed"));
    dropout.offset = static_cast<uint64_t>(ctx.attrs.get<int64_t>("offset"));
  }
  // The counters this call read, for the gradient (a Graph draws new ones on every run).
  auto* rng_state = static_cast<int64_t*>(ctx.outputs[2].data_ptr());
  rng_state[0] = static_cast<int64_t>(dropout.seed);
  rng_state[1] = static_cast<int64_t>(dropout.offset);
  if (p.l <= kFewQueries) {
    const int64_t work = std::max<int64_t>(1, p.l * p.s * (p.e + p.ev));
    parallel_for(0, p.batch, std::max<int64_t>(1, kFewQueryGrain / work), [&](int64_t begin, int64_t end) {
      few_query_rows<T, C>(p, dropout, begin, end, q, q_at, k, k_at, v, v_at, out, lse);
    });
    return;
  }
  const int64_t query_tiles = (p.l + kQueryTile - 1) / kQueryTile;
  parallel_for(0, p.batch * query_tiles, 1, [&](int64_t begin, int64_t end) {
    std::vector<O> q_buf, k_buf, v_buf, weights(static_cast<size_t>(kQueryTile * kKeyTile));
    std::vector<C> scores(static_cast<size_t>(kQueryTile * kKeyTile)), acc, row_max, row_sum, keep(kKeyTile);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / query_tiles;
      const int64_t i0 = (task % query_tiles) * kQueryTile;
      const int64_t rows = std::min(kQueryTile, p.l - i0);
      const auto at = static_cast<size_t>(b);
      const O* q_tile = as_compute<O>(q + q_at[at] + i0 * p.e, rows * p.e, q_buf);
      const int64_t keys = visible_keys(p, i0, rows);
      const O* k_all = as_compute<O>(k + k_at[at], keys * p.e, k_buf);
      const O* v_all = as_compute<O>(v + v_at[at], keys * p.ev, v_buf);
      acc.assign(static_cast<size_t>(rows * p.ev), C(0));
      row_max.assign(static_cast<size_t>(rows), -std::numeric_limits<C>::infinity());
      row_sum.assign(static_cast<size_t>(rows), C(0));
      for (int64_t j0 = 0; j0 < keys; j0 += kKeyTile) {
        const int64_t cols = std::min(kKeyTile, keys - j0);
        tile_scores<C, T, O>(p, b, i0, rows, j0, cols, q_tile, k_all + j0 * p.e, scores.data());
        for (int64_t r = 0; r < rows; ++r) {
          C* s = scores.data() + r * cols;
          const C tile_max = max_of(s, cols);
          const C new_max = std::max(row_max[static_cast<size_t>(r)], tile_max);
          if (new_max == -std::numeric_limits<C>::infinity()) {  // nothing seen yet: no weight
            std::fill(s, s + cols, C(0));
            continue;
          }
          const C rescale = std::exp(row_max[static_cast<size_t>(r)] - new_max);
          // The exps in a loop of their own, which vectorises (math::exp); the sum after it.
          for (int64_t c = 0; c < cols; ++c) s[c] = math::exp(s[c] - new_max);
          const C sum = sum_of(s, cols);
          row_sum[static_cast<size_t>(r)] = row_sum[static_cast<size_t>(r)] * rescale + sum;
          row_max[static_cast<size_t>(r)] = new_max;
          if (rescale != C(1)) {
            for (int64_t x = 0; x < p.ev; ++x) acc[static_cast<size_t>(r * p.ev + x)] *= rescale;
          }
          // The row sum normalises all weights; only the kept ones (scaled) reach the output.
          if (dropout.active()) {
            dropout.row_scales(p, b, i0 + r, j0, cols, keep.data());
            for (int64_t c = 0; c < cols; ++c) s[c] *= keep[static_cast<size_t>(c)];
          }
        }
        gemm(false, false, rows, p.ev, cols, C(1), as_operands(scores.data(), rows * cols, weights.data()), cols, v_all + j0 * p.ev, p.ev,
             C(1), acc.data(), p.ev);
      }
      for (int64_t r = 0; r < rows; ++r) {
        const C total = row_sum[static_cast<size_t>(r)];
        const C inverse = total > 0 ? C(1) / total : C(0);  // a row that sees no key gives zeros
        for (int64_t x = 0; x < p.ev; ++x) acc[static_cast<size_t>(r * p.ev + x)] *= inverse;
        lse[b * p.l + i0 + r] = total > 0 ? row_max[static_cast<size_t>(r)] + std::log(total) : -std::numeric_limits<C>::infinity();
      }
      store(acc.data(), rows * p.ev, out + (b * p.l + i0) * p.ev);
    }
  });
}

template <typename T, typename C, typename O>
void backward(KernelContext& ctx) {
  // Inputs: grad_out, query, key, value, out, logsumexp, rng_state, optional mask.
  const Tensor* mask = ctx.inputs.size() == 8 ? &ctx.inputs[7] : nullptr;
  const Problem p(ctx.inputs[1], ctx.inputs[2], ctx.inputs[3], mask, ctx.attrs);
  const T* grad_out = static_cast<const T*>(ctx.inputs[0].data_ptr());
  const T* q = static_cast<const T*>(ctx.inputs[1].data_ptr());
  const T* k = static_cast<const T*>(ctx.inputs[2].data_ptr());
  const T* v = static_cast<const T*>(ctx.inputs[3].data_ptr());
  const T* out = static_cast<const T*>(ctx.inputs[4].data_ptr());
  const auto* lse = static_cast<const C*>(ctx.inputs[5].data_ptr());
  Dropout dropout;
  dropout.p = ctx.attrs.get<double>("dropout_p");
  const auto* rng_state = static_cast<const int64_t*>(ctx.inputs[6].data_ptr());
  dropout.seed = static_cast<uint64_t>(rng_state[0]);
  dropout.offset = static_cast<uint64_t>(rng_state[1]);
  T* grad_q = static_cast<T*>(ctx.outputs[0].data_ptr());
  T* grad_k = static_cast<T*>(ctx.outputs[1].data_ptr());
  T* grad_v = static_cast<T*>(ctx.outputs[2].data_ptr());
  const auto scale = static_cast<C>(p.scale);
  parallel_for(0, p.batch, 1, [&](int64_t begin, int64_t end) {
    std::vector<O> q_buf, k_buf, v_buf, do_buf, weights_buf(static_cast<size_t>(kQueryTile * kKeyTile)),
        dscores_buf(static_cast<size_t>(kQueryTile * kKeyTile));
    std::vector<C> dq, dk, dv, row_dot;
    std::vector<C> probs(static_cast<size_t>(kQueryTile * kKeyTile)), dprobs(static_cast<size_t>(kQueryTile * kKeyTile));
    std::vector<C> kept(static_cast<size_t>(kQueryTile * kKeyTile)), keep(static_cast<size_t>(kQueryTile * kKeyTile));
    for (int64_t b = begin; b < end; ++b) {
      const O* qb = as_compute<O>(q + b * p.l * p.e, p.l * p.e, q_buf);
      const O* kb = as_compute<O>(k + b * p.s * p.e, p.s * p.e, k_buf);
      const O* vb = as_compute<O>(v + b * p.s * p.ev, p.s * p.ev, v_buf);
      const O* dob = as_compute<O>(grad_out + b * p.l * p.ev, p.l * p.ev, do_buf);
      const T* grad_out_b = grad_out + b * p.l * p.ev;
      const T* out_b = out + b * p.l * p.ev;
      const C* lseb = lse + b * p.l;
      // D_i = sum_x dO[i, x] * O[i, x]: the softmax gradient's row term.
      row_dot.assign(static_cast<size_t>(p.l), C(0));
      for (int64_t i = 0; i < p.l; ++i) row_dot[static_cast<size_t>(i)] = dot_of<C>(grad_out_b + i * p.ev, out_b + i * p.ev, p.ev);
      dq.assign(static_cast<size_t>(p.l * p.e), C(0));
      dk.assign(static_cast<size_t>(p.s * p.e), C(0));
      dv.assign(static_cast<size_t>(p.s * p.ev), C(0));
      for (int64_t j0 = 0; j0 < p.s; j0 += kKeyTile) {
        const int64_t cols = std::min(kKeyTile, p.s - j0);
        // Causal: rows before j0 see none of these keys.
        const int64_t first_row = p.causal ? (j0 / kQueryTile) * kQueryTile : 0;
        for (int64_t i0 = first_row; i0 < p.l; i0 += kQueryTile) {
          const int64_t rows = std::min(kQueryTile, p.l - i0);
          if (visible_keys(p, i0, rows) <= j0) continue;
          tile_scores<C, T, O>(p, b, i0, rows, j0, cols, qb + i0 * p.e, kb + j0 * p.e, probs.data());
          for (int64_t r = 0; r < rows; ++r) {
            const C row_lse = lseb[i0 + r];
            C* prob = probs.data() + r * cols;
            if (row_lse == -std::numeric_limits<C>::infinity()) std::fill(prob, prob + cols, C(0));
            else for (int64_t c = 0; c < cols; ++c) prob[c] = math::exp(prob[c] - row_lse);
          }
          // With dropout the output read the kept weights Z * P / (1 - p): dV takes those, and the
          // gradient of P is that of the kept weights times the same Z / (1 - p).
          const C* weights = probs.data();
          if (dropout.active()) {
            for (int64_t r = 0; r < rows; ++r) dropout.row_scales(p, b, i0 + r, j0, cols, keep.data() + r * cols);
            for (int64_t x = 0; x < rows * cols; ++x) kept[static_cast<size_t>(x)] = probs[static_cast<size_t>(x)] * keep[static_cast<size_t>(x)];
            weights = kept.data();
          }
          // dV_j += P^T dO_i;  dP = dO_i V_j^T
          gemm(true, false, cols, p.ev, rows, C(1), as_operands(weights, rows * cols, weights_buf.data()), cols, dob + i0 * p.ev, p.ev, C(1),
               dv.data() + j0 * p.ev, p.ev);
          gemm(false, true, rows, cols, p.ev, C(1), dob + i0 * p.ev, p.ev, vb + j0 * p.ev, p.ev, C(0), dprobs.data(), cols);
          if (dropout.active()) {
            for (int64_t x = 0; x < rows * cols; ++x) dprobs[static_cast<size_t>(x)] *= keep[static_cast<size_t>(x)];
          }
          // dS = P * (dP - D_i), into dprobs.
          for (int64_t r = 0; r < rows; ++r) {
            const C d = row_dot[static_cast<size_t>(i0 + r)];
            for (int64_t c = 0; c < cols; ++c) dprobs[r * cols + c] = probs[r * cols + c] * (dprobs[r * cols + c] - d);
          }
          // dQ_i += scale dS K_j;  dK_j += scale dS^T Q_i
          const O* dscores = as_operands(dprobs.data(), rows * cols, dscores_buf.data());
          gemm(false, false, rows, p.e, cols, scale, dscores, cols, kb + j0 * p.e, p.e, C(1), dq.data() + i0 * p.e, p.e);
          gemm(true, false, cols, p.e, rows, scale, dscores, cols, qb + i0 * p.e, p.e, C(1), dk.data() + j0 * p.e, p.e);
        }
      }
      store(dq.data(), p.l * p.e, grad_q + b * p.l * p.e);
      store(dk.data(), p.s * p.e, grad_k + b * p.s * p.e);
      store(dv.data(), p.s * p.ev, grad_v + b * p.s * p.ev);
    }
  });
}

template <void (*Native)(KernelContext&), void (*Widened)(KernelContext&)>
void bfloat16_kernel(KernelContext& ctx) {
  (bfloat16_products() ? Native : Widened)(ctx);
}

FLOW_REGISTER_KERNEL("flash_attention", DeviceType::kCPU, {kFloat32}, (forward<float, float, float>));
FLOW_REGISTER_KERNEL("flash_attention", DeviceType::kCPU, {kFloat64}, (forward<double, double, double>));
FLOW_REGISTER_KERNEL("flash_attention", DeviceType::kCPU, {kBFloat16},
                     (bfloat16_kernel<forward<BFloat16, float, BFloat16>, forward<BFloat16, float, float>>));
FLOW_REGISTER_KERNEL("flash_attention", DeviceType::kCPU, {kFloat16}, (forward<Half, float, float>));
FLOW_REGISTER_KERNEL("flash_attention_dropout", DeviceType::kCPU, {kFloat32}, (forward<float, float, float>));
FLOW_REGISTER_KERNEL("flash_attention_dropout", DeviceType::kCPU, {kFloat64}, (forward<double, double, double>));
FLOW_REGISTER_KERNEL("flash_attention_dropout", DeviceType::kCPU, {kBFloat16},
                     (bfloat16_kernel<forward<BFloat16, float, BFloat16>, forward<BFloat16, float, float>>));
FLOW_REGISTER_KERNEL("flash_attention_dropout", DeviceType::kCPU, {kFloat16}, (forward<Half, float, float>));
FLOW_REGISTER_KERNEL("flash_attention_grad", DeviceType::kCPU, {kFloat32}, (backward<float, float, float>));
FLOW_REGISTER_KERNEL("flash_attention_grad", DeviceType::kCPU, {kFloat64}, (backward<double, double, double>));
FLOW_REGISTER_KERNEL("flash_attention_grad", DeviceType::kCPU, {kBFloat16},
                     (bfloat16_kernel<backward<BFloat16, float, BFloat16>, backward<BFloat16, float, float>>));
FLOW_REGISTER_KERNEL("flash_attention_grad", DeviceType::kCPU, {kFloat16}, (backward<Half, float, float>));

}  // namespace
}  // namespace flow::cpu
