#pragma once
// Shared by the flow and libtorch benchmark programs, so both measure the same cases under the
// same names.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace bench {

// Threads for both frameworks: FLOW_BENCH_THREADS, default 2 (this machine's core count).
inline int bench_threads() {
  const char* env = std::getenv("FLOW_BENCH_THREADS");
  return env ? std::atoi(env) : 2;
}

// The thread counts of the threaded cases: FLOW_BENCH_THREAD_COUNTS ("1,4,16"), default 1 and 2 (this
// machine's core count); other counts matter on many-core machines.
inline std::vector<int64_t> bench_thread_counts() {
  std::vector<int64_t> counts;
  if (const char* env = std::getenv("FLOW_BENCH_THREAD_COUNTS")) {
    for (const char* p = env; *p;) {
      char* end = nullptr;
      const long count = std::strtol(p, &end, 10);
      if (end == p) break;
      if (count > 0) counts.push_back(count);
      p = *end == ',' ? end + 1 : end;
    }
  }
  return counts.empty() ? std::vector<int64_t>{1, 2} : counts;
}

// A case run at each of bench_thread_counts() (state.range(0)), timed by the wall clock: the shape of
// the training and inference cases, whose flow and libtorch twins scripts/compare_bench.py pairs.
template <typename Fn>
void register_threaded(const std::string& name, benchmark::TimeUnit unit, Fn&& fn) {
  auto* bench = benchmark::RegisterBenchmark(name.c_str(), std::forward<Fn>(fn))->Unit(unit)->UseRealTime();
  for (const int64_t threads : bench_thread_counts()) bench->Arg(threads);
}

inline void matmul_counters(benchmark::State& state, int64_t m, int64_t k, int64_t n) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * static_cast<double>(m * k * n) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Bytes read plus written per iteration, as GB/s.
inline void bandwidth_counters(benchmark::State& state, double bytes) {
  state.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

inline void matmul_shapes(benchmark::internal::Benchmark* b) {
  for (int64_t s : {256, 512, 1024, 2048}) b->Args({s, s, s});
  b->Args({64, 784, 512})->Args({64, 512, 512})->Args({64, 512, 10});
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}

inline void sizes(benchmark::internal::Benchmark* b) {
  for (int64_t n : {1 << 20, 1 << 22, 1 << 24}) b->Arg(n);
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}

// memcpy into a preallocated buffer: the bandwidth reference for element-wise ops.
inline void BM_memcpy(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  std::vector<float> src(n, 1.0f), dst(n, 0.0f);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), n * sizeof(float));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  bandwidth_counters(state, 2.0 * static_cast<double>(n * sizeof(float)));
}

// The same copy split over bench_threads() threads: the machine's copy bandwidth at the thread
// count the frameworks use.
inline void BM_memcpy_threads(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  const size_t threads = static_cast<size_t>(bench_threads());
  std::vector<float> src(n, 1.0f), dst(n, 0.0f);
  for (auto _ : state) {
    std::vector<std::thread> workers;
    for (size_t t = 0; t < threads; ++t) {
      const size_t begin = n * t / threads, end = n * (t + 1) / threads;
      workers.emplace_back([&, begin, end] { std::memcpy(dst.data() + begin, src.data() + begin, (end - begin) * sizeof(float)); });
    }
    for (auto& w : workers) w.join();
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  bandwidth_counters(state, 2.0 * static_cast<double>(n * sizeof(float)));
}

}  // namespace bench
