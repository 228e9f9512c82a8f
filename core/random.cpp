#include "core/random.h"

#include <numeric>
#include <utility>

#include "core/philox.h"

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

void Philox::block(uint64_t seed, uint64_t counter, uint32_t out[4]) { philox4x32_10(seed, counter, out); }

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
