// libtorch twin of bench/graph_bench.cpp: the same four models, batches, data shapes and thread
// counts, trained eagerly (libtorch's C++ API has no graph mode), as "<model>/torch/<threads>".
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <string>

#include "bench/bench_cases.h"
#include "bench/torch_models.h"

namespace {

torch::nn::Sequential layer_norm_mlp() {
  torch::nn::Sequential net{torch::nn::Flatten()};
  int64_t in = 784;
  for (int layer = 0; layer < 5; ++layer, in = 256) {
    net->push_back(torch::nn::Linear(in, 256));
    net->push_back(torch::nn::LayerNorm(torch::nn::LayerNormOptions({256})));
    net->push_back(torch::nn::GELU());
  }
  net->push_back(torch::nn::Linear(256, 10));
  return net;
}

void train_steps(benchmark::State& state, torch::nn::Sequential (*make_model)(), int64_t batch) {
  bench::set_torch_threads(static_cast<int>(state.range(0)));
  torch::manual_seed(0);
  torch::nn::Sequential model = make_model();
  const auto x = torch::rand({batch, 1, 28, 28}), y = torch::randint(0, 10, {batch});
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(1e-3));
  for (auto _ : state) {
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
  }
  state.counters["steps/s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
}

void register_cases() {
  struct Model {
    const char* name;
    torch::nn::Sequential (*make)();
    int64_t batch;
  };
  for (const Model& model : {Model{"mlp_b64", bench::torch_mlp, 64}, Model{"mlp_b8", bench::torch_mlp, 8}, Model{"cnn_b64", bench::torch_cnn, 64},
                             Model{"ln_b32", layer_norm_mlp, 32}}) {
    const std::string name = std::string(model.name) + "/torch";
    bench::register_threaded(name, benchmark::kMillisecond,
                             [model](benchmark::State& state) { train_steps(state, model.make, model.batch); });
  }
}

// Registered while the program starts, as BENCHMARK() does.
[[maybe_unused]] const bool registered = (register_cases(), true);

}  // namespace

BENCHMARK_MAIN();
