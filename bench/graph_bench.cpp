// Eager vs Graph: one training step (forward, cross-entropy, backward, SGD update) of the cases of
// bench/train_graph.h, each run eagerly and as a compiled nn::Graph on the same data. The cases are
// named "<model>/<mode>/<threads>", mode eager, graph, graph_amp (the Graph with
// config().enable_amp(): bfloat16 products, float32 master weights) or graph_scaler (the float32
// Graph with set_grad_scaler: what the loss scaling's checks and masked updates cost);
// bench/torch_graph_bench.cpp is the libtorch twin ("<model>/torch/<threads>").
// bench/step_profile.cpp profiles one case's steps op by op.
#include <benchmark/benchmark.h>

#include "bench/bench_cases.h"
#include "bench/train_graph.h"
#include "core/flow.h"

namespace {
namespace nn = flow::nn;
using ModulePtr = std::shared_ptr<nn::Module>;

enum class Mode { kEager, kGraph, kGraphAmp, kGraphScaler };

void train_steps(benchmark::State& state, ModulePtr (*make_model)(), int64_t batch, Mode mode) {
  flow::set_num_threads(static_cast<int>(state.range(0)));
  flow::manual_seed(0);
  ModulePtr model = make_model();
  const flow::Tensor x = flow::rand({batch, 1, 28, 28}), y = flow::randint(0, 10, {batch});
  auto optimizer = std::make_shared<flow::optim::SGD>(model->parameters(), flow::optim::SGDOptions(1e-3));
  if (mode != Mode::kEager) {
    test_graphs::TrainGraph train_graph(model, optimizer);
    train_graph.config().enable_amp(mode == Mode::kGraphAmp);
    if (mode == Mode::kGraphScaler) train_graph.set_grad_scaler(std::make_shared<flow::amp::GradScaler>());
    train_graph(x, y);  // traces and compiles, outside the timed loop
    state.counters["compile_ms"] = train_graph.compile_seconds() * 1e3;
    for (auto _ : state) benchmark::DoNotOptimize(train_graph(x, y));
  } else {
    nn::CrossEntropyLoss loss_fn;
    for (auto _ : state) {
      flow::Tensor loss = loss_fn(model->forward(x), y);
      optimizer->zero_grad();
      loss.backward();
      optimizer->step();
    }
  }
  state.counters["steps/s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
}

void register_cases() {
  for (const bench::TrainCase& model : bench::kTrainCases) {
    for (const auto& [mode, mode_name] : {std::pair{Mode::kEager, "eager"}, std::pair{Mode::kGraph, "graph"},
                                          std::pair{Mode::kGraphAmp, "graph_amp"}, std::pair{Mode::kGraphScaler, "graph_scaler"}}) {
      bench::register_threaded(std::string(model.name) + "/" + mode_name, benchmark::kMillisecond,
                               [model, mode](benchmark::State& state) { train_steps(state, model.make, model.batch, mode); });
    }
  }
}

// Registered while the program starts, as BENCHMARK() does.
[[maybe_unused]] const bool registered = (register_cases(), true);

}  // namespace

BENCHMARK_MAIN();
