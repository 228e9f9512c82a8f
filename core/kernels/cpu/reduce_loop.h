#pragma once
// The CPU reduction engine. The contiguous input's dims are split into kept and reduced ones
// (adjacent dims of one kind merged). Two layouts cover everything:
//  - innermost dim reduced: each output folds contiguous runs (a lane-parallel loop the compiler
//    vectorises);
//  - innermost dim kept: each output row accumulates whole input rows, vectorised along the row.
// Work is split over outputs, or, when there are few outputs, over fixed-size chunks of the
// reduced range combined in order, so results do not depend on the thread count.
#include <algorithm>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace flow::cpu {

struct ReducePlan {
  std::vector<int64_t> keep_sizes, keep_strides;      // outer keep dims (row layout: without the last)
  std::vector<int64_t> reduce_sizes, reduce_strides;  // outer reduce dims (run layout: without the last)
  int64_t inner = 1;                                  // length of the innermost (contiguous) group
  bool inner_reduced = true;
  int64_t num_outputs = 1;
  int64_t reduce_count = 1;  // elements folded into each output
};

ReducePlan make_reduce_plan(const Shape& shape, const std::vector<int64_t>& dims);

// Offset (in elements) of multi-index `linear` over sizes/strides (row-major).
inline int64_t offset_of(int64_t linear, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  int64_t offset = 0;
  for (size_t d = sizes.size(); d-- > 0;) {
    offset += (linear % sizes[d]) * strides[d];
    linear /= sizes[d];
  }
  return offset;
}

inline int64_t product(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

// R provides: using Acc; Acc identity(); Acc fold(Acc, const T* run, int64_t n) (contiguous run);
// Acc combine(Acc, Acc); Out finish(Acc, int64_t count); void fold_row(Acc* acc, const T* row, int64_t n).
template <typename T, typename Out, typename R>
void reduce(const Tensor& input, Tensor& output, const std::vector<int64_t>& dims, const R& r) {
  using Acc = typename R::Acc;
  const ReducePlan plan = make_reduce_plan(input.shape(), dims);
  const T* in = static_cast<const T*>(input.data_ptr());
  Out* out = static_cast<Out*>(output.data_ptr());
  const int64_t outer_reduce = product(plan.reduce_sizes);
  if (plan.num_outputs == 0) return;
  if (plan.inner_reduced) {
    // Each output folds outer_reduce runs of `inner` contiguous elements.
    auto fold_range = [&](int64_t base, int64_t begin, int64_t end) {  // [begin, end) over runs
      Acc acc = r.identity();
      for (int64_t k = begin; k < end; ++k) {
        acc = r.combine(acc, r.fold(r.identity(), in + base + offset_of(k, plan.reduce_sizes, plan.reduce_strides), plan.inner));
      }
      return acc;
    };
    // The layout choice depends only on the problem's shape, never on the thread count.
    constexpr int64_t kChunk = 1 << 16;
    constexpr int64_t kFewOutputs = 16;
    if (plan.num_outputs >= kFewOutputs || plan.reduce_count <= kChunk) {
      parallel_for(0, plan.num_outputs, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(plan.reduce_count, 1)),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t o = begin; o < end; ++o) {
                       const int64_t base = offset_of(o, plan.keep_sizes, plan.keep_strides);
                       Acc acc = outer_reduce == 1 ? r.fold(r.identity(), in + base, plan.inner) : fold_range(base, 0, outer_reduce);
                       out[o] = r.finish(acc, plan.reduce_count);
                     }
                   });
      return;
    }
    // Few outputs, long reductions: fixed chunks of the flattened reduced range.
    for (int64_t o = 0; o < plan.num_outputs; ++o) {
      const int64_t base = offset_of(o, plan.keep_sizes, plan.keep_strides);
      const int64_t total = plan.reduce_count;
      const int64_t chunks = (total + kChunk - 1) / kChunk;
      std::vector<Acc> partial(static_cast<size_t>(chunks), r.identity());
      parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c) {
          Acc acc = r.identity();
          int64_t position = c * kChunk;
          const int64_t stop = std::min(total, position + kChunk);
          while (position < stop) {
            const int64_t run = position / plan.inner, within = position % plan.inner;
            const int64_t n = std::min(plan.inner - within, stop - position);
            acc = r.combine(acc, r.fold(r.identity(), in + base + offset_of(run, plan.reduce_sizes, plan.reduce_strides) + within, n));
            position += n;
          }
          partial[static_cast<size_t>(c)] = acc;
        }
      });
      Acc acc = r.identity();
      for (const Acc& p : partial) acc = r.combine(acc, p);
      out[o] = r.finish(acc, plan.reduce_count);
    }
    return;
  }
  // Innermost dim kept: each output row of `inner` elements accumulates outer_reduce input rows.
  const int64_t rows = plan.num_outputs / plan.inner;
  const int64_t row_grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(plan.reduce_count * plan.inner, 1));
  auto do_rows = [&](int64_t row_begin, int64_t row_end, int64_t col_begin, int64_t col_end) {
    std::vector<Acc> acc(static_cast<size_t>(col_end - col_begin));
    for (int64_t row = row_begin; row < row_end; ++row) {
      std::fill(acc.begin(), acc.end(), r.identity());
      const int64_t base = offset_of(row, plan.keep_sizes, plan.keep_strides) + col_begin;
      for (int64_t k = 0; k < outer_reduce; ++k) {
        r.fold_row(acc.data(), in + base + offset_of(k, plan.reduce_sizes, plan.reduce_strides), col_end - col_begin);
      }
      for (int64_t c = col_begin; c < col_end; ++c) out[row * plan.inner + c] = r.finish(acc[static_cast<size_t>(c - col_begin)], plan.reduce_count);
    }
  };
  if (rows >= get_num_threads()) {
    parallel_for(0, rows, row_grain, [&](int64_t begin, int64_t end) { do_rows(begin, end, 0, plan.inner); });
  } else {
    // Few rows (e.g. summing dim 0 of (N, M)): split the columns instead; each column's order is fixed.
    for (int64_t row = 0; row < rows; ++row) {
      parallel_for(0, plan.inner, 1024, [&](int64_t begin, int64_t end) { do_rows(row, row + 1, begin, end); });
    }
  }
}

}  // namespace flow::cpu
