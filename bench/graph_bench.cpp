// Eager vs Graph: one training step (forward, cross-entropy, backward, SGD update) of five
// models, each run eagerly and as a compiled nn::Graph on the same data. The cases are named
// "<model>/<mode>/<threads>", mode eager, graph, graph_amp (the Graph with
// config().enable_amp(): bfloat16 products, float32 master weights) or graph_scaler (the float32
// Graph with set_grad_scaler: what the loss scaling's checks and masked updates cost);
// bench/torch_graph_bench.cpp is the libtorch twin ("<model>/torch/<threads>").
//   mlp_b64:  the quickstart MLP (784-512-512-10) at batch 64
//   mlp_b8:   the same MLP at batch 8, where per-op overhead dominates
//   cnn_b64:  the LeNet-style CNN at batch 64
//   ln_b32:   6 Linear layers of width 256 with LayerNorm and GELU between them, batch 32
//   wide_b256: the MLP at width 2048 (784-2048-2048-10), batch 256: products dominate
#include <benchmark/benchmark.h>

#include "bench/bench_cases.h"
#include "bench/bench_models.h"
#include "core/flow.h"
#include "graph/graph.h"
#include "nn/conv_norm.h"
#include "nn/modules.h"
#include "optim/optimizer.h"

namespace {
namespace nn = flow::nn;
using ModulePtr = std::shared_ptr<nn::Module>;

ModulePtr layer_norm_mlp() {
  auto net = std::make_shared<nn::Sequential>(std::make_shared<nn::Flatten>());
  int64_t in = 784;
  for (int layer = 0; layer < 5; ++layer, in = 256) {
    net->push_back(std::make_shared<nn::Linear>(in, 256));
    net->push_back(std::make_shared<nn::LayerNorm>(std::vector<int64_t>{256}));
    net->push_back(std::make_shared<nn::GELU>());
  }
  net->push_back(std::make_shared<nn::Linear>(256, 10));
  return net;
}

// The quickstart MLP 4x wider (2048): its products dominate a step, as in models larger than the
// quickstart's, where bfloat16 AMP pays off most.
ModulePtr wide_mlp() {
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 2048),
                                          std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(2048, 2048),
                                          std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(2048, 10));
}

struct TrainGraph : nn::Graph {
  TrainGraph(ModulePtr net, std::shared_ptr<flow::optim::SGD> optimizer) : model(register_module("model", std::move(net))) {
    add_optimizer(std::move(optimizer));
  }
  flow::TensorList build(const flow::TensorList& in) override {
    flow::Tensor loss = loss_fn(model->forward(in[0]), in[1]);
    loss.backward();
    return {loss};
  }
  ModulePtr model;
  nn::CrossEntropyLoss loss_fn;
};

enum class Mode { kEager, kGraph, kGraphAmp, kGraphScaler };

void train_steps(benchmark::State& state, ModulePtr (*make_model)(), int64_t batch, Mode mode) {
  flow::set_num_threads(static_cast<int>(state.range(0)));
  flow::manual_seed(0);
  ModulePtr model = make_model();
  const flow::Tensor x = flow::rand({batch, 1, 28, 28}), y = flow::randint(0, 10, {batch});
  auto optimizer = std::make_shared<flow::optim::SGD>(model->parameters(), flow::optim::SGDOptions(1e-3));
  if (mode != Mode::kEager) {
    TrainGraph train_graph(model, optimizer);
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
  struct Model {
    const char* name;
    ModulePtr (*make)();
    int64_t batch;
  };
  for (const Model& model : {Model{"mlp_b64", bench::mlp, 64}, Model{"mlp_b8", bench::mlp, 8}, Model{"cnn_b64", bench::cnn, 64},
                             Model{"ln_b32", layer_norm_mlp, 32}, Model{"wide_b256", wide_mlp, 256}}) {
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
