// Inference latency of a deployed model: the quickstart MLP and the LeNet-style CNN at batch 1
// and 64, run by oneflow_lite from an export directory, by the compiled inference nn::Graph the
// export came from, and eagerly (no grad). Lite cases also report the export's load time. Cases are "<model>_b<batch>/<mode>/<threads>";
// bench/torch_deploy_bench.cpp is the libtorch twin ("<model>_b<batch>/torch/<threads>").
#include <benchmark/benchmark.h>

#include <chrono>
#include <filesystem>

#include "bench/bench_cases.h"
#include "bench/bench_models.h"
#include "core/flow.h"
#include "core/grad_mode.h"
#include "graph/export.h"
#include "oneflow_lite/model.h"
#include "tests/common/graphs.h"

namespace {
namespace nn = flow::nn;
using ModulePtr = std::shared_ptr<nn::Module>;

enum class Mode { kLite, kGraph, kEager };

void infer(benchmark::State& state, ModulePtr (*make_model)(), int64_t batch, Mode mode) {
  flow::set_num_threads(static_cast<int>(state.range(0)));
  flow::manual_seed(0);
  ModulePtr model = make_model();
  model->eval();
  const flow::Tensor x = flow::rand({batch, 1, 28, 28});
  if (mode == Mode::kEager) {
    flow::autograd::NoGradGuard no_grad;
    for (auto _ : state) benchmark::DoNotOptimize(model->forward(x));
  } else {
    test_graphs::PredictGraph graph(model);
    graph(x);
    if (mode == Mode::kGraph) {
      for (auto _ : state) benchmark::DoNotOptimize(graph(x));
    } else {
      const auto dir = std::filesystem::temp_directory_path() / ("flow_deploy_bench_" + std::to_string(::getpid()));
      flow::save(graph, dir.string());
      const auto start = std::chrono::steady_clock::now();
      const auto lite = flow::lite::Model::load(dir.string());
      state.counters["load_ms"] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      std::filesystem::remove_all(dir);
      for (auto _ : state) benchmark::DoNotOptimize(lite->run({x}));
    }
  }
  state.counters["infer/s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
}

void register_cases() {
  struct Model {
    const char* name;
    ModulePtr (*make)();
  };
  for (const Model& model : {Model{"cnn", bench::cnn}, Model{"mlp", bench::mlp}}) {
    for (const int64_t batch : {1, 64}) {
      for (const auto& [mode, label] : {std::pair{Mode::kLite, "lite"}, std::pair{Mode::kGraph, "graph"}, std::pair{Mode::kEager, "eager"}}) {
        const std::string name = std::string(model.name) + "_b" + std::to_string(batch) + "/" + label;
        bench::register_threaded(name, benchmark::kMicrosecond,
                                 [model, batch, mode = mode](benchmark::State& state) { infer(state, model.make, batch, mode); });
      }
    }
  }
}

// Registered while the program starts, as BENCHMARK() does.
[[maybe_unused]] const bool registered = (register_cases(), true);

}  // namespace

BENCHMARK_MAIN();
