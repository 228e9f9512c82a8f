// The cases of bench/ops_bench.cpp through libtorch, for side-by-side ratios.
#include <torch/torch.h>

#include "bench/bench_cases.h"
#include "bench/torch_models.h"

namespace {

void BM_matmul(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  torch::manual_seed(0);
  const torch::Tensor a = torch::randn({m, k}), b = torch::randn({k, n});
  for (auto _ : state) benchmark::DoNotOptimize(torch::matmul(a, b).data_ptr());
  bench::matmul_counters(state, m, k, n);
}

void BM_add(benchmark::State& state) {
  const torch::Tensor a = torch::randn({state.range(0)}), b = torch::randn({state.range(0)});
  for (auto _ : state) benchmark::DoNotOptimize(torch::add(a, b).data_ptr());
  bench::bandwidth_counters(state, 3.0 * static_cast<double>(state.range(0)) * sizeof(float));
}

void BM_mul(benchmark::State& state) {
  const torch::Tensor a = torch::randn({state.range(0)}), b = torch::randn({state.range(0)});
  for (auto _ : state) benchmark::DoNotOptimize(torch::mul(a, b).data_ptr());
  bench::bandwidth_counters(state, 3.0 * static_cast<double>(state.range(0)) * sizeof(float));
}

void BM_relu(benchmark::State& state) {
  const torch::Tensor a = torch::randn({state.range(0)});
  for (auto _ : state) benchmark::DoNotOptimize(torch::relu(a).data_ptr());
  bench::bandwidth_counters(state, 2.0 * static_cast<double>(state.range(0)) * sizeof(float));
}

void BM_sum(benchmark::State& state) {
  const torch::Tensor a = torch::randn({state.range(0)});
  for (auto _ : state) benchmark::DoNotOptimize(torch::sum(a).data_ptr());
  bench::bandwidth_counters(state, static_cast<double>(state.range(0)) * sizeof(float));
}

}  // namespace

BENCHMARK(BM_matmul)->Apply(bench::matmul_shapes);
BENCHMARK(BM_add)->Apply(bench::sizes);
BENCHMARK(BM_mul)->Apply(bench::sizes);
BENCHMARK(BM_relu)->Apply(bench::sizes);
BENCHMARK(BM_sum)->Apply(bench::sizes);
BENCHMARK(bench::BM_memcpy)->Arg(1 << 24)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(bench::BM_memcpy_threads)->Arg(1 << 24)->Unit(benchmark::kMicrosecond)->UseRealTime();

int main(int argc, char** argv) {
  bench::set_torch_threads(bench::bench_threads());
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
