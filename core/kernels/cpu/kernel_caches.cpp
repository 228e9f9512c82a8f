#include "core/kernels/cpu/kernel_caches.h"

#include <atomic>

#include "core/lru_cache.h"

namespace flow::cpu {
namespace {

std::atomic<size_t>& primitive_capacity() {
  static std::atomic<size_t> capacity{cache_capacity_from_env("FLOW_PRIMITIVE_CACHE_CAPACITY", 1024)};
  return capacity;
}

std::atomic<int64_t> made{0};

}  // namespace

size_t primitive_cache_capacity() { return primitive_capacity().load(std::memory_order_relaxed); }

void set_primitive_cache_capacity(size_t capacity) {
  if (capacity == 0) fail("set_primitive_cache_capacity", "capacity must be at least 1");
  primitive_capacity().store(capacity, std::memory_order_relaxed);
}

int64_t primitives_made() { return made.load(std::memory_order_relaxed); }
void count_primitives_made() { made.fetch_add(1, std::memory_order_relaxed); }

size_t fused_program_cache_capacity() {
  static const size_t capacity = cache_capacity_from_env("FLOW_FUSED_PROGRAM_CACHE_CAPACITY", 256);
  return capacity;
}

}  // namespace flow::cpu
