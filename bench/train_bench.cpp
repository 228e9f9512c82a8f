// One training step (forward, loss, backward, SGD update) of the quickstart MLP and the
// LeNet-style CNN at batch 64; bench/torch_train_bench.cpp is the libtorch twin.
#include <benchmark/benchmark.h>

#include "bench/bench_cases.h"
#include "bench/bench_models.h"
#include "core/flow.h"
#include "nn/conv_norm.h"
#include "nn/modules.h"
#include "optim/optimizer.h"

namespace {
namespace nn = flow::nn;

void train_steps(benchmark::State& state, const std::shared_ptr<nn::Module>& model) {
  flow::set_num_threads(static_cast<int>(state.range(0)));
  flow::manual_seed(0);
  const flow::Tensor x = flow::rand({64, 1, 28, 28}), y = flow::randint(0, 10, {64});
  nn::CrossEntropyLoss loss_fn;
  flow::optim::SGD optimizer(model->parameters(), flow::optim::SGDOptions(1e-3));
  for (auto _ : state) {
    flow::Tensor loss = loss_fn(model->forward(x), y);
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
  }
  state.counters["steps/s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_train_mlp(benchmark::State& state) { train_steps(state, bench::mlp()); }
void BM_train_cnn(benchmark::State& state) { train_steps(state, bench::cnn()); }

}  // namespace

BENCHMARK(BM_train_mlp)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_train_cnn)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
