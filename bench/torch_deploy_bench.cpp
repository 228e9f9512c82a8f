// libtorch twin of bench/deploy_bench.cpp: eager inference (torch::NoGradGuard) of the same
// models, batches and thread counts, as "<model>_b<batch>/torch/<threads>".
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <string>

#include "bench/bench_cases.h"
#include "bench/torch_models.h"

namespace {

void infer(benchmark::State& state, torch::nn::Sequential (*make_model)(), int64_t batch) {
  bench::set_torch_threads(static_cast<int>(state.range(0)));
  torch::manual_seed(0);
  torch::nn::Sequential model = make_model();
  model->eval();
  const auto x = torch::rand({batch, 1, 28, 28});
  torch::NoGradGuard no_grad;
  for (auto _ : state) benchmark::DoNotOptimize(model->forward(x));
  state.counters["infer/s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
}

void register_cases() {
  struct Model {
    const char* name;
    torch::nn::Sequential (*make)();
  };
  for (const Model& model : {Model{"cnn", bench::torch_cnn}, Model{"mlp", bench::torch_mlp}}) {
    for (const int64_t batch : {1, 64}) {
      const std::string name = std::string(model.name) + "_b" + std::to_string(batch) + "/torch";
      bench::register_threaded(name, benchmark::kMicrosecond,
                               [model, batch](benchmark::State& state) { infer(state, model.make, batch); });
    }
  }
}

// Registered while the program starts, as BENCHMARK() does.
[[maybe_unused]] const bool registered = (register_cases(), true);

}  // namespace

BENCHMARK_MAIN();
