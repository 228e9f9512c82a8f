// Device code of sort, topk and multinomial. sort and topk: a block per line computes each element's rank in the CPU's strict
// order (core/kernels/cpu/sorting.cpp: NaN above every number, equal values by position) by
// counting the elements that go before it, and writes the elements ranked below k to their ranks.
// Ranks of a strict total order are distinct, so every output slot is written once, with no sort
// network and exactly the CPU's result. The count is O(n^2) per line: fine for the rows of
// attention, sampling and data shuffles it serves; long lines would want a radix sort.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/kernels/cuda/grid.cuh"
#include "core/kernels/cuda/launch.h"
#include "core/kernels/cuda/philox.cuh"

namespace flow::cuda {
namespace {

// Whether a is above b in descending order; NaN is the largest value.
template <typename T>
__device__ bool above(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (isnan(a)) return !isnan(b);
    if (isnan(b)) return false;
  }
  return a > b;
}

// Whether (value x, position a) goes before (y, b).
template <typename T>
__device__ bool before(T x, int64_t a, T y, int64_t b, bool descending) {
  if (above(x, y)) return descending;
  if (above(y, x)) return !descending;
  return a < b;
}

template <typename T>
__global__ void rank_select_kernel(int64_t lines, int64_t n, int64_t inner, int64_t k, bool descending, const T* in, T* values,
                                   int64_t* indices) {
  __shared__ T tile[kThreads];
  for (int64_t line = blockIdx.x; line < lines; line += gridDim.x) {
    const T* src = in + (line / inner) * n * inner + line % inner;
    const int64_t out = (line / inner) * k * inner + line % inner;
    // Every thread walks the same rounds (the tiles' barriers), its element possibly past the end.
    for (int64_t a0 = 0; a0 < n; a0 += blockDim.x) {
      const int64_t a = a0 + threadIdx.x;
      const T x = a < n ? src[a * inner] : T(0);
      int64_t rank = 0;
      for (int64_t b0 = 0; b0 < n; b0 += blockDim.x) {
        if (b0 + threadIdx.x < n) tile[threadIdx.x] = src[(b0 + threadIdx.x) * inner];
        __syncthreads();
        const int64_t count = n - b0 < blockDim.x ? n - b0 : blockDim.x;
        for (int64_t c = 0; c < count; ++c) rank += before(tile[c], b0 + c, x, a, descending);
        __syncthreads();
      }
      if (a < n && rank < k) {
        values[out + rank * inner] = x;
        indices[out + rank * inner] = a;
      }
    }
  }
}

// The failure of weight v, as the CPU's check_weights tests it (NaN fails `v >= 0` first).
template <typename T>
__device__ MultinomialFailure weight_failure(T v, bool per_entry) {
  if (!per_entry) return v >= T(0) && v < INFINITY ? MultinomialFailure::kNone : MultinomialFailure::kNotFiniteOrNegative;
  if (!(v >= T(0))) return MultinomialFailure::kNegativeEntry;
  return isfinite(v) ? MultinomialFailure::kNone : MultinomialFailure::kNonFiniteEntry;
}

// A block per row: the row's check (its first failing entry, else whether any weight is positive),
// then its draws. Repeated argmax picks the keys without replacement: O(num_samples * categories).
template <typename T>
__global__ void multinomial_kernel(int64_t rows, int64_t categories, int64_t num_samples, bool replacement, bool per_entry, uint64_t seed,
                                   uint64_t offset, const T* weights, double* workspace, int64_t* out, int64_t* error) {
  __shared__ int64_t first_bad[kThreads];
  __shared__ int64_t positive_counts[kThreads];
  __shared__ double best_key[kThreads];
  __shared__ int64_t best_index[kThreads];
  __shared__ double row_total;
  const auto uniform = [&](uint64_t counter) {
    uint32_t words[4];
    philox_block(seed, offset + counter, words);
    return philox_unit53(words[0], words[1]);
  };
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* w = weights + r * categories;
    double* keys = workspace + r * categories;  // cumulative weights with replacement
    int64_t bad = categories, positive = 0;
    for (int64_t c = threadIdx.x; c < categories; c += blockDim.x) {
      if (bad == categories && weight_failure(w[c], per_entry) != MultinomialFailure::kNone) bad = c;
      positive += w[c] > T(0);
    }
    first_bad[threadIdx.x] = bad;
    positive = block_sum(positive, positive_counts);  // its barriers also publish first_bad
    for (int width = blockDim.x / 2; width > 0; width /= 2) {
      if (threadIdx.x < width && first_bad[threadIdx.x + width] < first_bad[threadIdx.x]) first_bad[threadIdx.x] = first_bad[threadIdx.x + width];
      __syncthreads();
    }
    bad = first_bad[0];
    __syncthreads();  // first_bad is rewritten for the next row
    if (bad < categories || positive == 0) {
      if (threadIdx.x == 0) {
        const MultinomialFailure failure = bad < categories ? weight_failure(w[bad], per_entry) : MultinomialFailure::kNoPositiveWeight;
        error[0] = 1;
        atomicMax(reinterpret_cast<unsigned long long*>(error + 1), static_cast<unsigned long long>(((rows - r) << 3) | static_cast<int>(failure)));
      }
      continue;  // the same branch for the whole block
    }
    if (replacement) {
      if (threadIdx.x == 0) {  // in order, as the CPU sums: the same boundaries
        double total = 0;
        for (int64_t c = 0; c < categories; ++c) keys[c] = total += static_cast<double>(w[c]);
        row_total = total;
      }
      __syncthreads();
      for (int64_t s = threadIdx.x; s < num_samples; s += blockDim.x) {
        // The first category whose cumulative weight exceeds u * total; when u * total rounds up to
        // total, the first reaching total (the last positive weight).
        const double target = uniform(static_cast<uint64_t>(r * num_samples + s)) * row_total;
        int64_t low = 0, high = categories;
        while (low < high) {
          const int64_t mid = (low + high) / 2;
          if (keys[mid] > target) high = mid;
          else low = mid + 1;
        }
        if (low == categories) {
          low = 0;
          while (keys[low] < row_total) ++low;
        }
        out[r * num_samples + s] = low;
      }
      __syncthreads();  // row_total is rewritten for the next row
      continue;
    }
    for (int64_t c = threadIdx.x; c < categories; c += blockDim.x) {
      // u in (0, 1), so E = -log u is positive and finite.
      keys[c] = static_cast<double>(w[c]) / -log(uniform(static_cast<uint64_t>(r * categories + c)) + 0x1p-54);
    }
    __syncthreads();
    for (int64_t s = 0; s < num_samples; ++s) {
      double key = -1;
      int64_t index = categories;
      for (int64_t c = threadIdx.x; c < categories; c += blockDim.x) {
        if (keys[c] > key) {  // ascending c: the first of equal keys stays
          key = keys[c];
          index = c;
        }
      }
      best_key[threadIdx.x] = key;
      best_index[threadIdx.x] = index;
      __syncthreads();
      for (int width = blockDim.x / 2; width > 0; width /= 2) {
        if (threadIdx.x < width) {
          const double other = best_key[threadIdx.x + width];
          const int64_t other_index = best_index[threadIdx.x + width];
          if (other > best_key[threadIdx.x] || (other == best_key[threadIdx.x] && other_index < best_index[threadIdx.x])) {
            best_key[threadIdx.x] = other;
            best_index[threadIdx.x] = other_index;
          }
        }
        __syncthreads();
      }
      if (threadIdx.x == 0) {
        out[r * num_samples + s] = best_index[0];
        keys[best_index[0]] = -1;  // below every key (keys are >= 0): taken
      }
      __syncthreads();
    }
  }
}

}  // namespace

const char* multinomial(ScalarType type, int64_t rows, int64_t categories, int64_t num_samples, bool replacement, bool per_entry_checks,
                        uint64_t seed, uint64_t offset, const void* weights, double* workspace, int64_t* out, int64_t* error) {
  if (rows == 0) return nullptr;
  return dispatch_floating(type, [&](auto tag) {
    using T = decltype(tag);
    multinomial_kernel<T><<<blocks_for_outputs(rows), kThreads>>>(rows, categories, num_samples, replacement, per_entry_checks, seed, offset,
                                                                  static_cast<const T*>(weights), workspace, out, error);
    return launch_status();
  });
}

const char* sort_lines(ScalarType type, int64_t outer, int64_t n, int64_t inner, int64_t k, bool descending, const void* in, void* values,
                       int64_t* indices) {
  if (outer * inner == 0 || k == 0) return nullptr;
  if (type == ScalarType::kBool) return "unsupported dtype bool";
  return dispatch_all(type, [&](auto tag) {
    using T = decltype(tag);
    rank_select_kernel<T><<<blocks_for_outputs(outer * inner), kThreads>>>(outer * inner, n, inner, k, descending, static_cast<const T*>(in),
                                                                            static_cast<T*>(values), indices);
    return launch_status();
  });
}

}  // namespace flow::cuda
