#pragma once
// Philox4x32-10 on the device: core/philox.h's rounds, which the CPU's Philox::block runs too, so
// that a CUDA kernel reading counter (seed, offset + n) draws the very words the CPU kernel reads there.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/philox.h"

namespace flow::cuda {

__device__ inline void philox_block(uint64_t seed, uint64_t counter, uint32_t out[4]) { philox4x32_10(seed, counter, out); }

// Philox::to_unit and Philox::to_unit53: uniforms in [0, 1) from 24 and 53 random bits (exact in
// double, so the same values as on the CPU).
__device__ inline double philox_unit(uint32_t word) { return (word >> 8) * (1.0 / 16777216.0); }
__device__ inline double philox_unit53(uint32_t hi, uint32_t lo) {
  return static_cast<double>((static_cast<uint64_t>(hi) << 21) ^ (lo >> 11)) * (1.0 / 9007199254740992.0);
}

}  // namespace flow::cuda
