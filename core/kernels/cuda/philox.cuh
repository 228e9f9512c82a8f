#pragma once
// Philox4x32-10 on the device, word for word core/random.cpp's Philox::block, so that a CUDA
// kernel reading counter (seed, offset + n) draws the very words the CPU kernel reads there.
#include <cuda_runtime.h>

#include <cstdint>

namespace flow::cuda {

__device__ inline void philox_block(uint64_t seed, uint64_t counter, uint32_t out[4]) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

// Philox::to_unit and Philox::to_unit53: uniforms in [0, 1) from 24 and 53 random bits (exact in
// double, so the same values as on the CPU).
__device__ inline double philox_unit(uint32_t word) { return (word >> 8) * (1.0 / 16777216.0); }
__device__ inline double philox_unit53(uint32_t hi, uint32_t lo) {
  return static_cast<double>((static_cast<uint64_t>(hi) << 21) ^ (lo >> 11)) * (1.0 / 9007199254740992.0);
}

}  // namespace flow::cuda
