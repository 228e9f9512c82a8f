#pragma once
#include "core/op.h"

namespace flow::cpu {

// The CPU kernel of a float16/bfloat16 call for an op that has a float32 kernel only: inputs in
// those dtypes are widened to float32, `float32_kernel` runs, and outputs are rounded back to
// their dtype. Each op then computes in float32 and rounds once, as on CPUs without 16-bit float
// arithmetic (PyTorch's CPU kernels compute these dtypes in float as well). An in-place op's
// widened input is the output its kernel writes.
KernelFn computed_in_float32(KernelFn float32_kernel);

// computed_in_float32(Kernel) run on ctx, made once per kernel: the fallback of 16-bit kernels
// that take a faster path where they can (oneDNN's bfloat16 primitives, exact selections).
template <void (*Kernel)(KernelContext&)>
void in_float32(KernelContext& ctx) {
  static const KernelFn kernel = computed_in_float32(Kernel);
  kernel(ctx);
}

}  // namespace flow::cpu
