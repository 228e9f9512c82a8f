// flow::LruCache (core/lru_cache.h) and the CPU kernels' caches bounded by it.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "common/test_util.h"
#include "core/kernels/cpu/kernel_caches.h"
#include "core/lru_cache.h"
#include "core/ops/all.h"
#include "core/ops/norm.h"

namespace {

using flow::LruCache;

TEST(LruCache, EvictsTheLeastRecentlyUsed) {
  LruCache<int, const std::string> cache(2);
  int made = 0;
  auto get = [&](int key) {
    return *cache.get_or_make(key, [&] {
      ++made;
      return std::make_shared<const std::string>(std::to_string(key));
    });
  };
  EXPECT_EQ(get(1), "1");
  EXPECT_EQ(get(2), "2");
  EXPECT_EQ(made, 2);
  EXPECT_EQ(get(1), "1");  // now 2 is the least recently used
  EXPECT_EQ(made, 2);
  EXPECT_EQ(get(3), "3");  // evicts 2
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(get(1), "1");
  EXPECT_EQ(made, 3);
  EXPECT_EQ(get(2), "2");  // made again, evicting 3
  EXPECT_EQ(made, 4);
  EXPECT_EQ(get(1), "1");
  EXPECT_EQ(made, 4);
  cache.set_capacity(1);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(get(1), "1");
  EXPECT_EQ(made, 4) << "1 was the most recently used, kept";
  EXPECT_EQ(cache.capacity(), 1u);
  cache.clear();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_THROW_MSG(cache.set_capacity(0), "capacity must be at least 1");
}

TEST(LruCache, AnEvictedValueLivesWhileHeld) {
  LruCache<int, const std::vector<int>> cache(1);
  const auto held = cache.get_or_make(1, [] { return std::make_shared<const std::vector<int>>(1000, 7); });
  cache.get_or_make(2, [] { return std::make_shared<const std::vector<int>>(); });
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(held->at(999), 7);
}

TEST(LruCache, AFailedMakeCachesNothingAndReachesTheCaller) {
  LruCache<int, const int> cache(2);
  EXPECT_THROW(cache.get_or_make(1, []() -> std::shared_ptr<const int> { throw std::runtime_error("cannot make"); }), std::runtime_error);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(*cache.get_or_make(1, [] { return std::make_shared<const int>(5); }), 5);
}

TEST(LruCache, ConcurrentCallersOfOneKeyMakeItOnce) {
  LruCache<int, const int> cache(4);
  std::atomic<int> made{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int key = 0; key < 4; ++key) {
        const auto value = cache.get_or_make(key, [&] {
          ++made;
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          return std::make_shared<const int>(key * 10);
        });
        EXPECT_EQ(*value, key * 10);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(made.load(), 4);
}

TEST(LruCache, CapacityFromTheEnvironment) {
  ::setenv("FLOW_TEST_CACHE_CAPACITY", "12", 1);
  EXPECT_EQ(flow::cache_capacity_from_env("FLOW_TEST_CACHE_CAPACITY", 5), 12u);
  ::setenv("FLOW_TEST_CACHE_CAPACITY", "0", 1);
  EXPECT_THROW_MSG(flow::cache_capacity_from_env("FLOW_TEST_CACHE_CAPACITY", 5), "FLOW_TEST_CACHE_CAPACITY must be a positive integer, got '0'");
  ::setenv("FLOW_TEST_CACHE_CAPACITY", "lots", 1);
  EXPECT_THROW_MSG(flow::cache_capacity_from_env("FLOW_TEST_CACHE_CAPACITY", 5), "got 'lots'");
  ::unsetenv("FLOW_TEST_CACHE_CAPACITY");
  EXPECT_EQ(flow::cache_capacity_from_env("FLOW_TEST_CACHE_CAPACITY", 5), 5u);
}

// layer_norm's float32 kernel runs on oneDNN primitives cached by shape (above 32768 elements;
// smaller ones are a plain loop): with room for two shapes, a third evicts the least recently
// used, which is made again when it comes back.
TEST(KernelCaches, OneDnnPrimitivesOfAtMostCapacityShapes) {
  const size_t default_capacity = flow::cpu::primitive_cache_capacity();
  flow::cpu::set_primitive_cache_capacity(2);
  const auto run = [](int64_t rows) {
    const flow::Tensor x = flow::randn({rows, 32});
    const flow::Tensor out = flow::layer_norm(x, {32});
    const flow::Tensor mean = flow::mean(x, {1}, true);
    const flow::Tensor centered = x - mean;
    const flow::Tensor expected = centered / flow::sqrt(flow::mean(centered * centered, {1}, true) + 1e-5);
    const auto a = out.tolist<double>(), e = expected.tolist<double>();
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], e[i], 1e-4) << "rows " << rows << " at " << i;
  };
  run(2001);
  run(2002);
  const int64_t made = flow::cpu::primitives_made();
  run(2003);  // evicts 2001
  EXPECT_EQ(flow::cpu::primitives_made(), made + 1);
  run(2003);
  run(2002);
  EXPECT_EQ(flow::cpu::primitives_made(), made + 1) << "2002 and 2003 stay cached";
  run(2001);
  EXPECT_EQ(flow::cpu::primitives_made(), made + 2) << "2001 was evicted";
  flow::cpu::set_primitive_cache_capacity(default_capacity);
  EXPECT_THROW_MSG(flow::cpu::set_primitive_cache_capacity(0), "capacity must be at least 1");
}

}  // namespace
