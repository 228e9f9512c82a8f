#pragma once
// The CPU element-wise engine: walks an output and any number of inputs broadcast to its shape,
// each with its own strides, as runs along the innermost dimension, split over the thread pool.
// Contiguous runs take a plain loop the compiler vectorises.
#include <array>
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace flow::cpu {

template <size_t N>
struct LoopPlan {
  std::vector<int64_t> sizes;                   // innermost last, after merging dims
  std::array<std::vector<int64_t>, N> strides;  // bytes, per operand
  std::array<char*, N> base;
  int64_t numel = 0;
};

// Operand 0 is the output; the others are broadcast to its shape (stride 0 on broadcast dims).
template <size_t N>
LoopPlan<N> make_loop_plan(const Tensor& out, const std::array<const Tensor*, N - 1>& inputs) {
  LoopPlan<N> plan;
  const int64_t ndim = out.dim();
  std::array<std::vector<int64_t>, N> strides;
  for (size_t k = 0; k < N; ++k) {
    const Tensor& t = k == 0 ? out : *inputs[k - 1];
    strides[k].assign(static_cast<size_t>(ndim), 0);
    const int64_t offset = ndim - t.dim();
    for (int64_t d = 0; d < t.dim(); ++d) {
      if (t.size(d) != 1) strides[k][d + offset] = t.stride(d) * static_cast<int64_t>(itemsize(t.dtype()));
    }
    plan.base[k] = static_cast<char*>(t.data_ptr());
  }
  // Merge dims d-1 and d when every operand steps through them as one.
  std::vector<int64_t> sizes;
  std::array<std::vector<int64_t>, N> merged;
  for (int64_t d = 0; d < ndim; ++d) {
    const int64_t size = out.size(d);
    if (size == 1) continue;
    bool can_merge = !sizes.empty();
    for (size_t k = 0; k < N && can_merge; ++k) can_merge = merged[k].back() == strides[k][d] * size;
    if (can_merge) {
      sizes.back() *= size;
      for (size_t k = 0; k < N; ++k) merged[k].back() = strides[k][d];
    } else {
      sizes.push_back(size);
      for (size_t k = 0; k < N; ++k) merged[k].push_back(strides[k][d]);
    }
  }
  if (sizes.empty()) {
    sizes.push_back(1);
    for (size_t k = 0; k < N; ++k) merged[k].push_back(0);
  }
  plan.sizes = std::move(sizes);
  plan.strides = std::move(merged);
  plan.numel = out.numel();
  return plan;
}

// Calls inner(ptrs, inner_strides, n) for each run of the innermost dimension in
// [begin, end) of the linear element order.
template <size_t N, typename Inner>
void run_range(const LoopPlan<N>& plan, int64_t begin, int64_t end, Inner&& inner) {
  const size_t ndim = plan.sizes.size();
  std::vector<int64_t> index(ndim, 0);
  int64_t rest = begin;
  for (size_t d = ndim; d-- > 0;) {
    index[d] = rest % plan.sizes[d];
    rest /= plan.sizes[d];
  }
  std::array<int64_t, N> inner_strides;
  for (size_t k = 0; k < N; ++k) inner_strides[k] = plan.strides[k][ndim - 1];
  int64_t position = begin;
  while (position < end) {
    std::array<char*, N> ptrs;
    for (size_t k = 0; k < N; ++k) {
      char* p = plan.base[k];
      for (size_t d = 0; d < ndim; ++d) p += index[d] * plan.strides[k][d];
      ptrs[k] = p;
    }
    const int64_t n = std::min(plan.sizes[ndim - 1] - index[ndim - 1], end - position);
    inner(ptrs, inner_strides, n);
    position += n;
    index[ndim - 1] += n;
    for (size_t d = ndim - 1; d > 0 && index[d] == plan.sizes[d]; --d) {
      index[d] = 0;
      ++index[d - 1];
    }
  }
}

template <size_t N, typename Inner>
void for_each_run(const LoopPlan<N>& plan, Inner&& inner) {
  parallel_for(0, plan.numel, kElementwiseGrain, [&](int64_t begin, int64_t end) { run_range(plan, begin, end, inner); });
}

// out[i] = f(in[i]) over a plan of (out, in), for a caller that has made the plan already.
template <typename Out, typename In, typename F>
void unary_loop(const LoopPlan<2>& plan, F f) {
  for_each_run(plan, [&](const std::array<char*, 2>& p, const std::array<int64_t, 2>& s, int64_t n) {
    Out* o = reinterpret_cast<Out*>(p[0]);
    const In* a = reinterpret_cast<const In*>(p[1]);
    if (s[0] == sizeof(Out) && s[1] == sizeof(In)) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(a[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) {
        *reinterpret_cast<Out*>(p[0] + i * s[0]) = f(*reinterpret_cast<const In*>(p[1] + i * s[1]));
      }
    }
  });
}

// out[i] = f(in[i]) with out, in of any strides; in broadcast to out's shape.
template <typename Out, typename In, typename F>
void unary_loop(Tensor& out, const Tensor& in, F f) {
  unary_loop<Out, In>(make_loop_plan<2>(out, {&in}), f);
}

// out[i] = f(a[i], b[i]) with NumPy broadcasting of a and b to out's shape.
template <typename Out, typename A, typename B, typename F>
void binary_loop(Tensor& out, const Tensor& a, const Tensor& b, F f) {
  auto plan = make_loop_plan<3>(out, {&a, &b});
  for_each_run(plan, [&](const std::array<char*, 3>& p, const std::array<int64_t, 3>& s, int64_t n) {
    Out* __restrict o = reinterpret_cast<Out*>(p[0]);
    const A* __restrict x = reinterpret_cast<const A*>(p[1]);
    const B* __restrict y = reinterpret_cast<const B*>(p[2]);
    if (s[0] == sizeof(Out) && s[1] == sizeof(A) && s[2] == sizeof(B)) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
    } else if (s[0] == sizeof(Out) && s[1] == sizeof(A) && s[2] == 0) {
      const B yv = *y;
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], yv);
    } else if (s[0] == sizeof(Out) && s[1] == 0 && s[2] == sizeof(B)) {
      const A xv = *x;
      for (int64_t i = 0; i < n; ++i) o[i] = f(xv, y[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) {
        *reinterpret_cast<Out*>(p[0] + i * s[0]) =
            f(*reinterpret_cast<const A*>(p[1] + i * s[1]), *reinterpret_cast<const B*>(p[2] + i * s[2]));
      }
    }
  });
}

// out[i] = f(a[i], b[i], c[i]) with broadcasting (where, clamp with tensor bounds).
template <typename Out, typename A, typename B, typename C, typename F>
void ternary_loop(Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c, F f) {
  auto plan = make_loop_plan<4>(out, {&a, &b, &c});
  for_each_run(plan, [&](const std::array<char*, 4>& p, const std::array<int64_t, 4>& s, int64_t n) {
    Out* __restrict o = reinterpret_cast<Out*>(p[0]);
    const A* __restrict x = reinterpret_cast<const A*>(p[1]);
    const B* __restrict y = reinterpret_cast<const B*>(p[2]);
    const C* __restrict z = reinterpret_cast<const C*>(p[3]);
    const bool dense = s[0] == sizeof(Out) && s[1] == sizeof(A) && s[2] == sizeof(B);
    if (dense && s[3] == sizeof(C)) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i], z[i]);
      return;
    }
    if (dense && s[3] == 0) {  // a scalar third operand, as in where(mask, grad, 0)
      const C zv = *z;
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i], zv);
      return;
    }
    for (int64_t i = 0; i < n; ++i) {
      *reinterpret_cast<Out*>(p[0] + i * s[0]) =
          f(*reinterpret_cast<const A*>(p[1] + i * s[1]), *reinterpret_cast<const B*>(p[2] + i * s[2]),
            *reinterpret_cast<const C*>(p[3] + i * s[3]));
    }
  });
}

}  // namespace flow::cpu
