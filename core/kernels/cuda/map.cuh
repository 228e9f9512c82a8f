#pragma once
// The element-wise launch machinery shared by the .cu files of element-wise ops (elementwise.cu,
// pointwise.cu): grid-stride kernels over one or two strided operands (broadcast through stride
// 0) over the dims the host merged, and dense variants moving four elements per load.
// Internal linkage on purpose: every .cu file is compiled whole (no relocatable device code), so
// each gets its own instances of these kernel templates.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/kernels/cuda/grid.cuh"
#include "core/kernels/cuda/launch.h"

namespace flow::cuda {
namespace {

// Unrolled over kMaxDims so that every index into the by-value kernel parameters is a constant: a
// runtime index makes the compiler copy Geometry and each Operand into per-thread local memory
// (216-288 bytes of stack per thread, measured as ~285 bytes of DRAM traffic per element).
__device__ inline int64_t offset_of(int64_t linear, const Geometry& g, const Operand& operand) {
  if (g.ndim == 1) return linear * operand.strides[0];  // dense operands: the host merged their dims
  int64_t offset = 0;
#pragma unroll
  for (int d = kMaxDims - 1; d >= 0; --d) {
    if (d < g.ndim) {
      offset += (linear % g.sizes[d]) * operand.strides[d];
      linear /= g.sizes[d];
    }
  }
  return offset;
}

template <typename Out, typename In, typename F>
__global__ void map1(Geometry g, int64_t numel, Operand out, Operand in, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(blockDim.x) * gridDim.x) {
    const In x = static_cast<const In*>(in.data)[offset_of(i, g, in)];
    static_cast<Out*>(out.data)[offset_of(i, g, out)] = f(x);
  }
}

template <typename Out, typename In, typename F>
__global__ void map2(Geometry g, int64_t numel, Operand out, Operand a, Operand b, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(blockDim.x) * gridDim.x) {
    const In x = static_cast<const In*>(a.data)[offset_of(i, g, a)];
    const In y = static_cast<const In*>(b.data)[offset_of(i, g, b)];
    static_cast<Out*>(out.data)[offset_of(i, g, out)] = f(x, y);
  }
}

// Dense operands (one merged dim, unit strides, aligned) move kVector elements per load and store.
constexpr int kVector = 4;

template <typename T>
struct alignas(sizeof(T) * kVector) Pack {
  T values[kVector];
};

template <typename Out, typename In, typename F>
__global__ void map1_dense(int64_t packs, Pack<Out>* out, const Pack<In>* in, F f) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < packs; p += int64_t(blockDim.x) * gridDim.x) {
    const Pack<In> x = in[p];
    Pack<Out> y;
#pragma unroll
    for (int k = 0; k < kVector; ++k) y.values[k] = f(x.values[k]);
    out[p] = y;
  }
}

template <typename Out, typename In, typename F>
__global__ void map2_dense(int64_t packs, Pack<Out>* out, const Pack<In>* a, const Pack<In>* b, F f) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < packs; p += int64_t(blockDim.x) * gridDim.x) {
    const Pack<In> x = a[p], y = b[p];
    Pack<Out> z;
#pragma unroll
    for (int k = 0; k < kVector; ++k) z.values[k] = f(x.values[k], y.values[k]);
    out[p] = z;
  }
}

template <typename T>
bool packs_fit(const Geometry& g, const Operand& operand) {
  return g.ndim == 1 && operand.strides[0] == 1 && reinterpret_cast<uintptr_t>(operand.data) % sizeof(Pack<T>) == 0;
}

// The operand's elements from `first` on, as a one-dim dense tail.
template <typename T>
Operand advanced(Operand operand, int64_t first) {
  operand.data = static_cast<T*>(operand.data) + first;
  return operand;
}

// Runs f over every element: whole packs through the dense kernel where the operands allow it,
// the rest (all of it for strided or broadcast operands) through the strided one.
template <typename Out, typename In, typename F>
const char* launch_map1(const Geometry& g, int64_t numel, Operand out, Operand in, F f) {
  if (packs_fit<Out>(g, out) && packs_fit<In>(g, in)) {
    const int64_t packs = numel / kVector, first = packs * kVector;
    if (packs > 0) {
      map1_dense<Out, In><<<blocks_for(packs), kThreads>>>(packs, static_cast<Pack<Out>*>(out.data), static_cast<const Pack<In>*>(in.data), f);
    }
    if (first < numel) {
      Geometry tail;
      tail.ndim = 1;
      tail.sizes[0] = numel - first;
      map1<Out, In><<<blocks_for(numel - first), kThreads>>>(tail, numel - first, advanced<Out>(out, first), advanced<In>(in, first), f);
    }
  } else {
    map1<Out, In><<<blocks_for(numel), kThreads>>>(g, numel, out, in, f);
  }
  return launch_status();
}

template <typename Out, typename In, typename F>
const char* launch_map2(const Geometry& g, int64_t numel, Operand out, Operand a, Operand b, F f) {
  if (packs_fit<Out>(g, out) && packs_fit<In>(g, a) && packs_fit<In>(g, b)) {
    const int64_t packs = numel / kVector, first = packs * kVector;
    if (packs > 0) {
      map2_dense<Out, In><<<blocks_for(packs), kThreads>>>(packs, static_cast<Pack<Out>*>(out.data), static_cast<const Pack<In>*>(a.data),
                                                           static_cast<const Pack<In>*>(b.data), f);
    }
    if (first < numel) {
      Geometry tail;
      tail.ndim = 1;
      tail.sizes[0] = numel - first;
      map2<Out, In><<<blocks_for(numel - first), kThreads>>>(tail, numel - first, advanced<Out>(out, first), advanced<In>(a, first),
                                                             advanced<In>(b, first), f);
    }
  } else {
    map2<Out, In><<<blocks_for(numel), kThreads>>>(g, numel, out, a, b, f);
  }
  return launch_status();
}

}  // namespace
}  // namespace flow::cuda
