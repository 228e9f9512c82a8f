// Device code of fused_elementwise (and fused_linear's epilogue): one thread per output element
// (grid-stride) runs the whole program, holding each step's value in a local array, and writes the
// program's outputs last. Every step follows the CPU's scalar function (core/kernels/cpu/
// elementwise_math.h): NaN in maximum/minimum, clamp's bounds and relu's NaN behave as there.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/kernels/cuda/grid.cuh"
#include "core/kernels/cuda/launch.h"

namespace flow::cuda {
namespace {

// The table is a kernel parameter: within the 4 KB every CUDA driver accepts.
static_assert(sizeof(FusedProgram) + sizeof(int64_t) <= 4096, "the fused program table must fit the kernel parameters");

template <typename C>
__device__ C sigmoid_of(C x) {
  return C(1) / (C(1) + exp(-x));
}

template <typename C>
__device__ C gelu_of(C x, bool tanh_form) {
  if (tanh_form) return x * sigmoid_of(C(2) * (C(0.7978845608028654) * (x + C(0.044715) * x * x * x)));
  return C(0.5) * x * (C(1) + erf(x * C(0.7071067811865476)));
}

// GELU's derivative as the CPU writes it: the tanh form through s = sigmoid(2u), the erf form as
// Phi(x) + x phi(x).
template <typename C>
__device__ C gelu_derivative_of(C x, bool tanh_form) {
  if (tanh_form) {
    const C s = sigmoid_of(C(2) * (C(0.7978845608028654) * (x + C(0.044715) * x * x * x)));
    return s + C(2) * x * s * (C(1) - s) * C(0.7978845608028654) * (C(1) + C(3 * 0.044715) * x * x);
  }
  const C cdf = C(0.5) * (C(1) + erf(x * C(0.7071067811865476)));
  return cdf + x * exp(C(-0.5) * x * x) * C(0.3989422804014327);
}

// maximum and minimum give NaN when either side is NaN, as the CPU's max_of / min_of.
template <typename C>
__device__ C max_of(C a, C b) {
  if (isnan(a) || isnan(b)) return std::numeric_limits<C>::quiet_NaN();
  return a < b ? b : a;
}
template <typename C>
__device__ C min_of(C a, C b) {
  if (isnan(a) || isnan(b)) return std::numeric_limits<C>::quiet_NaN();
  return b < a ? b : a;
}

// One step on its arguments' values (b and c are read only by the ops that take them).
template <typename C>
__device__ C apply_step(const FusedStep& step, C a, C b, C c) {
  const C s = static_cast<C>(step.scalar);
  switch (step.code) {
    case FusedCode::kNeg: return -a;
    case FusedCode::kAbs: return a < C(0) ? -a : a;
    case FusedCode::kSign: return static_cast<C>((C(0) < a) - (a < C(0)));
    case FusedCode::kExp: return exp(a);
    case FusedCode::kLog: return log(a);
    case FusedCode::kSqrt: return sqrt(a);
    case FusedCode::kRsqrt: return C(1) / sqrt(a);
    case FusedCode::kSin: return sin(a);
    case FusedCode::kCos: return cos(a);
    case FusedCode::kTanh: return tanh(a);
    case FusedCode::kSigmoid: return sigmoid_of(a);
    case FusedCode::kRelu: return a < C(0) ? C(0) : a;
    case FusedCode::kSilu: return a / (C(1) + exp(-a));
    case FusedCode::kGelu: return gelu_of(a, step.tanh_form);
    case FusedCode::kClamp: {
      const C lo = static_cast<C>(step.lo), hi = static_cast<C>(step.hi);
      return a < lo ? lo : (a > hi ? hi : a);
    }
    case FusedCode::kAddScalar: return a + s;
    case FusedCode::kSubScalar: return a - s;
    case FusedCode::kRsubScalar: return s - a;
    case FusedCode::kMulScalar: return a * s;
    case FusedCode::kDivScalar: return a / s;
    case FusedCode::kRdivScalar: return s / a;
    case FusedCode::kPowScalar: return pow(a, s);
    case FusedCode::kRpowScalar: return pow(s, a);
    case FusedCode::kAdd: return a + b;
    case FusedCode::kSub: return a - b;
    case FusedCode::kMul: return a * b;
    case FusedCode::kDiv: return a / b;
    case FusedCode::kPow: return pow(a, b);
    case FusedCode::kMaximum: return max_of(a, b);
    case FusedCode::kMinimum: return min_of(a, b);
    case FusedCode::kReluGrad: return b > C(0) ? a : C(0);
    case FusedCode::kGeluGrad: return a * gelu_derivative_of(b, step.tanh_form);
    case FusedCode::kWhere: return a != C(0) ? b : c;
    case FusedCode::kCopy: return a;  // operands were converted to C as they were loaded
  }
  return a;
}

// __grid_constant__: the table is read where the launch put it (dynamic indexing would otherwise
// copy all of it into each thread's local memory).
template <typename C>
__global__ void fused_kernel(const __grid_constant__ FusedProgram program, int64_t numel) {
  C values[kMaxFusedSteps];
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < numel; i += int64_t(blockDim.x) * gridDim.x) {
    const auto value_of = [&](int ref) -> C {
      if (ref < 0) return values[-ref - 1];
      const FusedOperand& operand = program.operands[ref];
      return load_as<C>(operand.data, operand.type, (i / operand.inner) % operand.size);
    };
    for (int j = 0; j < program.num_steps; ++j) {
      const FusedStep& step = program.steps[j];
      const C a = value_of(step.args[0]);
      C b = C(0), c = C(0);
      if (step.code >= FusedCode::kAdd && step.code <= FusedCode::kWhere) b = value_of(step.args[1]);
      if (step.code == FusedCode::kWhere) c = value_of(step.args[2]);
      values[j] = apply_step(step, a, b, c);
    }
    for (int o = 0; o < program.num_outputs; ++o) {
      const FusedOutput& out = program.outputs[o];
      store_as(out.data, out.type, i, values[out.step]);
    }
  }
}

}  // namespace

const char* fused_elementwise(ScalarType compute, const FusedProgram& program, int64_t numel) {
  if (numel == 0) return nullptr;
  return dispatch_floating(compute, [&](auto tag) {
    using C = decltype(tag);
    fused_kernel<C><<<blocks_for(numel), kThreads>>>(program, numel);
    return launch_status();
  });
}

}  // namespace flow::cuda
