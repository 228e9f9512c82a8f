#include "core/random.h"

#include <numeric>
#include <utility>

namespace flow {

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mutex_);
  seed_ = seed;
  offset_ = 0;
}

void Generator::set_offset(uint64_t offset) {
  std::lock_guard<std::mutex> lock(mutex_);
  offset_ = offset;
}

std::pair<uint64_t, uint64_t> Generator::reserve(uint64_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t first = offset_;
  offset_ += count;
  return {seed_, first};
}

Generator& default_generator() {
  static Generator generator;
  return generator;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

void Philox::block(uint64_t seed, uint64_t counter, uint32_t out[4]) {
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

std::vector<int64_t> random_permutation(int64_t n, uint64_t seed, uint64_t offset) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) {
    uint32_t words[4];
    Philox::block(seed, offset + static_cast<uint64_t>(i), words);
    const uint64_t bits = (static_cast<uint64_t>(words[0]) << 32) | words[1];
    std::swap(perm[static_cast<size_t>(i)], perm[bits % static_cast<uint64_t>(i + 1)]);
  }
  return perm;
}

}  // namespace flow
