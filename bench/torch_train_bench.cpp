// libtorch twin of bench/train_bench.cpp: same models, batch, data shapes and thread counts.
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include "bench/torch_models.h"

namespace {

void train_steps(benchmark::State& state, torch::nn::Sequential model) {
  bench::set_torch_threads(static_cast<int>(state.range(0)));
  torch::manual_seed(0);
  const auto x = torch::rand({64, 1, 28, 28}), y = torch::randint(0, 10, {64});
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(1e-3));
  for (auto _ : state) {
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
  }
  state.counters["steps/s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_train_mlp(benchmark::State& state) { train_steps(state, bench::torch_mlp()); }
void BM_train_cnn(benchmark::State& state) { train_steps(state, bench::torch_cnn()); }

}  // namespace

BENCHMARK(BM_train_mlp)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_train_cnn)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
