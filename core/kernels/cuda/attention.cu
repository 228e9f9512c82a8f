// Device code of flash_attention(_dropout) and flash_attention_grad, the semantics of
// core/kernels/cpu/attention.cpp. Forward: one block per query row visits the visible keys in
// tiles of kAttentionThreads (a thread per key scores it), keeping the online softmax's running
// max and sum and rescaling the row's accumulator when the max grows, so no (L, S) matrix exists.
// Backward, without atomics (deterministic): a block per query row accumulates its dQ, then a
// block per key its dK and dV, each recomputing the weights from the saved log-sum-exp. 16-bit
// inputs compute in float, as on the CPU.
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "core/kernels/cuda/grid.cuh"
#include "core/kernels/cuda/launch.h"
#include "core/kernels/cuda/philox.cuh"

namespace flow::cuda {
namespace {

// A power of two (block_sum, block_max): the key (query) tile of one step.
constexpr int kAttentionThreads = 128;
// The dynamic shared memory a block may use without opting in.
constexpr size_t kSharedLimit = 48 * 1024;

struct BatchOffsets {
  int64_t query = 0, key = 0, value = 0, mask = 0;
};

__device__ inline BatchOffsets batch_offsets(const AttentionBatch& layout, int64_t b) {
  BatchOffsets at;
#pragma unroll
  for (int d = kMaxDims - 1; d >= 0; --d) {
    if (d < layout.ndim) {
      const int64_t index = b % layout.sizes[d];
      b /= layout.sizes[d];
      at.query += index * layout.query[d];
      at.key += index * layout.key[d];
      at.value += index * layout.value[d];
      at.mask += index * layout.mask[d];
    }
  }
  return at;
}

template <typename C>
__device__ C block_max(C value, C* shared) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int width = blockDim.x / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) shared[threadIdx.x] = fmax(shared[threadIdx.x], shared[threadIdx.x + width]);
    __syncthreads();
  }
  const C result = shared[0];
  __syncthreads();
  return result;
}

// The dropout factor of weight (b, i, j): 0 when dropped, else 1 / (1 - p).
template <typename C>
__device__ C keep_factor(const AttentionProblem& p, uint64_t seed, uint64_t offset, int64_t b, int64_t i, int64_t j) {
  const auto element = static_cast<uint64_t>((b * p.l + i) * p.s + j);
  uint32_t words[4];
  philox_block(seed, offset + element / 4, words);
  return philox_unit(words[element % 4]) < p.dropout_p ? C(0) : static_cast<C>(1.0 / (1.0 - p.dropout_p));
}

// scale * (q_row . key row j) + mask(i, j), with q_row already in the compute type.
template <typename T, typename C>
__device__ C score_of(const AttentionProblem& p, const C* q_row, const T* key_row, const T* mask, int64_t i, int64_t j) {
  C dot = C(0);
  for (int64_t x = 0; x < p.e; ++x) dot += q_row[x] * static_cast<C>(key_row[x]);
  C score = dot * static_cast<C>(p.scale);
  if (mask != nullptr) score += static_cast<C>(mask[i * p.mask_row_stride + j * p.mask_col_stride]);
  return score;
}

template <typename T, typename C>
__device__ C dot_row(const C* shared_row, const T* row, int64_t n) {
  C dot = C(0);
  for (int64_t x = 0; x < n; ++x) dot += shared_row[x] * static_cast<C>(row[x]);
  return dot;
}

// Keys 0..visible-1 of query row i.
__device__ inline int64_t visible_keys(const AttentionProblem& p, int64_t i) { return p.causal ? (i + 1 < p.s ? i + 1 : p.s) : p.s; }

template <typename T, typename C>
__global__ void forward_kernel(AttentionProblem p, AttentionBatch layout, const T* query, const T* key, const T* value, const T* mask,
                               T* out, C* logsumexp, int64_t* rng_state, uint64_t seed, uint64_t offset) {
  extern __shared__ double attention_shared[];  // double-aligned, carved into the compute type's arrays
  C* q_row = reinterpret_cast<C*>(attention_shared);
  C* acc = q_row + p.e;
  C* weights = acc + p.ev;
  C* reduce = weights + kAttentionThreads;
  const C minus_inf = -std::numeric_limits<C>::infinity();
  if (blockIdx.x == 0 && threadIdx.x == 0) {  // the counters this call read, for the gradient
    rng_state[0] = static_cast<int64_t>(seed);
    rng_state[1] = static_cast<int64_t>(offset);
  }
  for (int64_t row = blockIdx.x; row < p.batch * p.l; row += gridDim.x) {
    const int64_t b = row / p.l, i = row % p.l;
    const BatchOffsets at = batch_offsets(layout, b);
    const T* q = query + at.query + i * p.e;
    for (int64_t x = threadIdx.x; x < p.e; x += blockDim.x) q_row[x] = static_cast<C>(q[x]);
    for (int64_t x = threadIdx.x; x < p.ev; x += blockDim.x) acc[x] = C(0);
    __syncthreads();
    const int64_t keys = visible_keys(p, i);
    C row_max = minus_inf, row_sum = C(0);
    for (int64_t j0 = 0; j0 < keys; j0 += blockDim.x) {
      const int64_t j = j0 + threadIdx.x;
      const int64_t cols = keys - j0 < blockDim.x ? keys - j0 : blockDim.x;
      const C score = j < keys ? score_of(p, q_row, key + at.key + j * p.e, mask == nullptr ? nullptr : mask + at.mask, i, j) : minus_inf;
      const C new_max = fmax(row_max, block_max(score, reduce));
      if (new_max == minus_inf) continue;  // nothing seen yet: no weight (the same branch for the whole block)
      const C rescale = exp(row_max - new_max);
      C weight = j < keys ? exp(score - new_max) : C(0);
      // The row sum normalises all weights; only the kept ones (scaled) reach the output.
      row_sum = row_sum * rescale + block_sum(weight, reduce);
      row_max = new_max;
      if (p.dropout_p > 0 && j < keys) weight *= keep_factor<C>(p, seed, offset, b, i, j);
      weights[threadIdx.x] = weight;
      __syncthreads();
      const T* v = value + at.value + j0 * p.ev;
      for (int64_t x = threadIdx.x; x < p.ev; x += blockDim.x) {
        C total = acc[x] * rescale;
        for (int64_t c = 0; c < cols; ++c) total += weights[c] * static_cast<C>(v[c * p.ev + x]);
        acc[x] = total;
      }
      __syncthreads();
    }
    const C inverse = row_sum > C(0) ? C(1) / row_sum : C(0);  // a row that sees no key gives zeros
    for (int64_t x = threadIdx.x; x < p.ev; x += blockDim.x) out[row * p.ev + x] = static_cast<T>(acc[x] * inverse);
    if (threadIdx.x == 0) logsumexp[row] = row_sum > C(0) ? row_max + log(row_sum) : minus_inf;
    __syncthreads();  // q_row and acc are rewritten for the next row
  }
}

// The softmax gradient's row terms D_i = dO_i . O_i, and dQ_i = scale * sum_j dS_ij K_j with
// dS_ij = P_ij (dP_ij - D_i), dP_ij = (dO_i . V_j) times the dropout factor.
template <typename T, typename C>
__global__ void query_grad_kernel(AttentionProblem p, AttentionBatch layout, const T* grad_out, const T* query, const T* key,
                                  const T* value, const T* out, const C* logsumexp, const int64_t* rng_state, const T* mask, C* row_dot,
                                  T* grad_query) {
  extern __shared__ double attention_shared[];  // double-aligned, carved into the compute type's arrays
  C* q_row = reinterpret_cast<C*>(attention_shared);
  C* do_row = q_row + p.e;
  C* dq = do_row + p.ev;
  C* ds = dq + p.e;
  C* reduce = ds + kAttentionThreads;
  const auto seed = static_cast<uint64_t>(rng_state[0]), offset = static_cast<uint64_t>(rng_state[1]);
  const C minus_inf = -std::numeric_limits<C>::infinity();
  for (int64_t row = blockIdx.x; row < p.batch * p.l; row += gridDim.x) {
    const int64_t b = row / p.l, i = row % p.l;
    const BatchOffsets at = batch_offsets(layout, b);
    const T* q = query + at.query + i * p.e;
    C partial = C(0);
    for (int64_t x = threadIdx.x; x < p.ev; x += blockDim.x) {
      do_row[x] = static_cast<C>(grad_out[row * p.ev + x]);
      partial += do_row[x] * static_cast<C>(out[row * p.ev + x]);
    }
    for (int64_t x = threadIdx.x; x < p.e; x += blockDim.x) {
      q_row[x] = static_cast<C>(q[x]);
      dq[x] = C(0);
    }
    const C d = block_sum(partial, reduce);  // its barrier also publishes q_row, do_row and dq
    if (threadIdx.x == 0) row_dot[row] = d;
    const C row_lse = logsumexp[row];
    const int64_t keys = row_lse == minus_inf ? 0 : visible_keys(p, i);  // -inf: every weight is 0
    for (int64_t j0 = 0; j0 < keys; j0 += blockDim.x) {
      const int64_t j = j0 + threadIdx.x;
      const int64_t cols = keys - j0 < blockDim.x ? keys - j0 : blockDim.x;
      C grad_score = C(0);
      if (j < keys) {
        const C prob = exp(score_of(p, q_row, key + at.key + j * p.e, mask == nullptr ? nullptr : mask + at.mask, i, j) - row_lse);
        C grad_prob = dot_row(do_row, value + at.value + j * p.ev, p.ev);
        if (p.dropout_p > 0) grad_prob *= keep_factor<C>(p, seed, offset, b, i, j);
        grad_score = prob * (grad_prob - d);
      }
      ds[threadIdx.x] = grad_score;
      __syncthreads();
      const T* k = key + at.key + j0 * p.e;
      for (int64_t x = threadIdx.x; x < p.e; x += blockDim.x) {
        C total = C(0);
        for (int64_t c = 0; c < cols; ++c) total += ds[c] * static_cast<C>(k[c * p.e + x]);
        dq[x] += static_cast<C>(p.scale) * total;
      }
      __syncthreads();
    }
    for (int64_t x = threadIdx.x; x < p.e; x += blockDim.x) grad_query[row * p.e + x] = static_cast<T>(dq[x]);
    __syncthreads();  // the shared rows are rewritten for the next row
  }
}

// Per key j: dV_j = sum_i W_ij dO_i (W the kept, scaled weights) and dK_j = scale * sum_i dS_ij Q_i,
// over the queries that see key j; reads the D_i query_grad_kernel wrote.
template <typename T, typename C>
__global__ void key_value_grad_kernel(AttentionProblem p, AttentionBatch layout, const T* grad_out, const T* query, const T* key,
                                      const T* value, const C* logsumexp, const int64_t* rng_state, const T* mask, const C* row_dot,
                                      T* grad_key, T* grad_value) {
  extern __shared__ double attention_shared[];  // double-aligned, carved into the compute type's arrays
  C* k_row = reinterpret_cast<C*>(attention_shared);
  C* v_row = k_row + p.e;
  C* dk = v_row + p.ev;
  C* dv = dk + p.e;
  C* weights = dv + p.ev;
  C* ds = weights + kAttentionThreads;
  const auto seed = static_cast<uint64_t>(rng_state[0]), offset = static_cast<uint64_t>(rng_state[1]);
  const C minus_inf = -std::numeric_limits<C>::infinity();
  for (int64_t column = blockIdx.x; column < p.batch * p.s; column += gridDim.x) {
    const int64_t b = column / p.s, j = column % p.s;
    const BatchOffsets at = batch_offsets(layout, b);
    for (int64_t x = threadIdx.x; x < p.e; x += blockDim.x) {
      k_row[x] = static_cast<C>(key[at.key + j * p.e + x]);
      dk[x] = C(0);
    }
    for (int64_t x = threadIdx.x; x < p.ev; x += blockDim.x) {
      v_row[x] = static_cast<C>(value[at.value + j * p.ev + x]);
      dv[x] = C(0);
    }
    __syncthreads();
    const int64_t first = p.causal ? j : 0;  // causal: rows before j do not see key j
    for (int64_t i0 = first; i0 < p.l; i0 += blockDim.x) {
      const int64_t i = i0 + threadIdx.x;
      const int64_t rows = p.l - i0 < blockDim.x ? p.l - i0 : blockDim.x;
      C weight = C(0), grad_score = C(0);
      if (i < p.l && logsumexp[b * p.l + i] != minus_inf) {
        const T* q = query + at.query + i * p.e;
        C dot = C(0);
        for (int64_t x = 0; x < p.e; ++x) dot += static_cast<C>(q[x]) * k_row[x];
        C score = dot * static_cast<C>(p.scale);
        if (mask != nullptr) score += static_cast<C>(mask[at.mask + i * p.mask_row_stride + j * p.mask_col_stride]);
        const C prob = exp(score - logsumexp[b * p.l + i]);
        const C keep = p.dropout_p > 0 ? keep_factor<C>(p, seed, offset, b, i, j) : C(1);
        weight = prob * keep;
        const C grad_prob = dot_row(v_row, grad_out + (b * p.l + i) * p.ev, p.ev) * keep;
        grad_score = prob * (grad_prob - row_dot[b * p.l + i]);
      }
      weights[threadIdx.x] = weight;
      ds[threadIdx.x] = grad_score;
      __syncthreads();
      const T* grad_rows = grad_out + (b * p.l + i0) * p.ev;
      for (int64_t x = threadIdx.x; x < p.ev; x += blockDim.x) {
        C total = C(0);
        for (int64_t r = 0; r < rows; ++r) total += weights[r] * static_cast<C>(grad_rows[r * p.ev + x]);
        dv[x] += total;
      }
      const T* q_rows = query + at.query + i0 * p.e;
      for (int64_t x = threadIdx.x; x < p.e; x += blockDim.x) {
        C total = C(0);
        for (int64_t r = 0; r < rows; ++r) total += ds[r] * static_cast<C>(q_rows[r * p.e + x]);
        dk[x] += static_cast<C>(p.scale) * total;
      }
      __syncthreads();
    }
    for (int64_t x = threadIdx.x; x < p.e; x += blockDim.x) grad_key[column * p.e + x] = static_cast<T>(dk[x]);
    for (int64_t x = threadIdx.x; x < p.ev; x += blockDim.x) grad_value[column * p.ev + x] = static_cast<T>(dv[x]);
    __syncthreads();
  }
}

// A grid of at least one block: the forward's block 0 writes rng_state even for empty problems.
int grid_for(int64_t rows) { return rows > 0 ? blocks_for_outputs(rows) : 1; }

constexpr const char* kTooWide = "the head dims need more shared memory than the attention kernel has (48 KiB)";

}  // namespace

const char* attention_forward(ScalarType type, const AttentionProblem& p, const AttentionBatch& layout, const void* query, const void* key,
                              const void* value, const void* mask, void* out, void* logsumexp, int64_t* rng_state, uint64_t seed,
                              uint64_t offset) {
  return dispatch_floating_with_reduced(type, [&](auto zero) -> const char* {
    using T = decltype(zero);
    using C = compute_t<T>;
    const size_t shared = sizeof(C) * static_cast<size_t>(p.e + p.ev + 2 * kAttentionThreads);
    if (shared > kSharedLimit) return kTooWide;
    forward_kernel<T, C><<<grid_for(p.batch * p.l), kAttentionThreads, shared>>>(
        p, layout, static_cast<const T*>(query), static_cast<const T*>(key), static_cast<const T*>(value), static_cast<const T*>(mask),
        static_cast<T*>(out), static_cast<C*>(logsumexp), rng_state, seed, offset);
    return launch_status();
  });
}

const char* attention_backward(ScalarType type, const AttentionProblem& p, const AttentionBatch& layout, const void* grad_out,
                               const void* query, const void* key, const void* value, const void* out, const void* logsumexp,
                               const int64_t* rng_state, const void* mask, void* row_dot, void* grad_query, void* grad_key,
                               void* grad_value) {
  return dispatch_floating_with_reduced(type, [&](auto zero) -> const char* {
    using T = decltype(zero);
    using C = compute_t<T>;
    const size_t query_shared = sizeof(C) * static_cast<size_t>(2 * p.e + p.ev + 2 * kAttentionThreads);
    const size_t key_shared = sizeof(C) * static_cast<size_t>(2 * p.e + 2 * p.ev + 2 * kAttentionThreads);
    if (query_shared > kSharedLimit || key_shared > kSharedLimit) return kTooWide;
    const T* q = static_cast<const T*>(query);
    const T* k = static_cast<const T*>(key);
    const T* v = static_cast<const T*>(value);
    const T* dout = static_cast<const T*>(grad_out);
    const T* m = static_cast<const T*>(mask);
    const C* lse = static_cast<const C*>(logsumexp);
    if (p.batch * p.l > 0) {
      query_grad_kernel<T, C><<<grid_for(p.batch * p.l), kAttentionThreads, query_shared>>>(
          p, layout, dout, q, k, v, static_cast<const T*>(out), lse, rng_state, m, static_cast<C*>(row_dot), static_cast<T*>(grad_query));
      if (const char* error = launch_status()) return error;
    }
    if (p.batch * p.s > 0) {
      key_value_grad_kernel<T, C><<<grid_for(p.batch * p.s), kAttentionThreads, key_shared>>>(
          p, layout, dout, q, k, v, lse, rng_state, m, static_cast<const C*>(row_dot), static_cast<T*>(grad_key), static_cast<T*>(grad_value));
      return launch_status();
    }
    return nullptr;
  });
}

}  // namespace flow::cuda
