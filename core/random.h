#pragma once
#include <cstdint>
#include <mutex>
#include <vector>

namespace flow {

// Counter-based random numbers (Philox 4x32-10): element i of a draw depends only on the seed
// and the draw's starting offset, never on thread count or scheduling.
class Generator {
 public:
  explicit Generator(uint64_t seed = 67280421310721ULL) : seed_(seed) {}
  void manual_seed(uint64_t seed);
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_offset(uint64_t offset);
  // Reserves `count` 128-bit counters for one draw; returns {seed, first counter}.
  std::pair<uint64_t, uint64_t> reserve(uint64_t count);

 private:
  std::mutex mutex_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

Generator& default_generator();
// Seeds the default generator, like torch.manual_seed / oneflow.manual_seed.
void manual_seed(uint64_t seed);

// randperm's permutation of 0..n-1: Fisher-Yates from the last position down, swap i reading
// Philox counter offset + i. A chain of swaps, each on the result of the ones before.
std::vector<int64_t> random_permutation(int64_t n, uint64_t seed, uint64_t offset);

// Philox4x32-10 block: four 32-bit random words for (seed, counter).
struct Philox {
  static void block(uint64_t seed, uint64_t counter, uint32_t out[4]);
  // Uniform float in [0, 1) from a 32-bit word.
  static double to_unit(uint32_t word) { return (word >> 8) * (1.0 / 16777216.0); }
  // Uniform double in [0, 1) with 53 random bits from two words.
  static double to_unit53(uint32_t hi, uint32_t lo) {
    return static_cast<double>((static_cast<uint64_t>(hi) << 21) ^ (lo >> 11)) * (1.0 / 9007199254740992.0);
  }
};

}  // namespace flow
