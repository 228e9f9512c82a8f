#pragma once
// Philox4x32-10's ten rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"): the
// one definition the CPU generator (core/random.cpp) and the CUDA kernels
// (core/kernels/cuda/philox.cuh) both compile, so that counter (seed, n) gives the same four words
// on either device. A plain header: nvcc includes it from device code.
#include <cstdint>

#if defined(__CUDACC__)
#define FLOW_HOST_DEVICE __host__ __device__
#else
#define FLOW_HOST_DEVICE
#endif

namespace flow {

FLOW_HOST_DEVICE inline void philox4x32_10(uint64_t seed, uint64_t counter, uint32_t out[4]) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
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

}  // namespace flow

#undef FLOW_HOST_DEVICE
