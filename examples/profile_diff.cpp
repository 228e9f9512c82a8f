// Profiles a few training steps of a small MLP twice, eagerly and as a compiled nn::Graph, and
// writes both Chrome traces (open them in Perfetto or chrome://tracing, or compare them with
// flow_trace_diff). The schedule skips the first step, where the Graph compiles, and a warm-up
// step, then records three. Prints each profile's key averages.
// Usage: profile_diff [--out-dir DIR] [--batch N]
//        flow_trace_diff DIR/eager_trace.json DIR/graph_trace.json
#include <iostream>
#include <memory>
#include <string>

#include "cli/cli.h"
#include "core/flow.h"
#include "core/profiler.h"
#include "graph/graph.h"
#include "nn/modules.h"
#include "optim/optimizer.h"

namespace nn = flow::nn;
namespace profiler = flow::profiler;

namespace {

constexpr int64_t kWait = 1, kWarmup = 1, kActive = 3;

std::shared_ptr<nn::Sequential> make_mlp() {
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(256, 128), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(128, 128), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(128, 10));
}

struct TrainStep : nn::Graph {
  TrainStep(std::shared_ptr<nn::Sequential> net, std::shared_ptr<flow::optim::SGD> optimizer) : model(std::move(net)) {
    register_module("model", model);
    add_optimizer(std::move(optimizer));
  }
  flow::TensorList build(const flow::TensorList& in) override {
    flow::Tensor loss = loss_fn((*model)(in[0]), in[1]);
    loss.backward();
    return {loss};
  }
  std::shared_ptr<nn::Sequential> model;
  nn::CrossEntropyLoss loss_fn;
};

profiler::ProfileOptions options() { return profiler::ProfileOptions().schedule(kWait, kWarmup, kActive); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Writes Chrome traces of an MLP's training steps run eagerly and as an nn::Graph.", "profile_diff");
  std::string out_dir = ".";
  int64_t batch = 64;
  app.add_option("--out-dir", out_dir, "where eager_trace.json and graph_trace.json go")->capture_default_str();
  app.add_option("--batch", batch, "samples per step")->check(flow::cli::at_least<int64_t>(1))->capture_default_str();
  if (const auto status = flow::cli::parse(app, argc, argv)) return *status;
  try {
    flow::manual_seed(0);
    const flow::Tensor x = flow::randn({batch, 256});
    const flow::Tensor y = flow::randint(0, 10, {batch});

    auto eager_model = make_mlp();
    flow::optim::SGD eager_sgd(eager_model->parameters(), flow::optim::SGDOptions(0.01));
    nn::CrossEntropyLoss loss_fn;
    {
      profiler::Profile profile(options());
      for (int64_t step = 0; step < kWait + kWarmup + kActive; ++step) {
        eager_sgd.zero_grad();
        loss_fn((*eager_model)(x), y).backward();
        eager_sgd.step();
        profile.step();
      }
      profile.export_chrome_trace(out_dir + "/eager_trace.json");
      std::cout << "Eager:\n" << profile.key_averages().table("total", 8) << "\n";
    }

    auto graph_model = make_mlp();
    TrainStep train_step(graph_model, std::make_shared<flow::optim::SGD>(graph_model->parameters(), flow::optim::SGDOptions(0.01)));
    {
      profiler::Profile profile(options());
      for (int64_t step = 0; step < kWait + kWarmup + kActive; ++step) {
        train_step(x, y);
        profile.step();
      }
      profile.export_chrome_trace(out_dir + "/graph_trace.json");
      std::cout << "Graph:\n" << profile.key_averages().table("total", 8);
    }
  } catch (const std::exception& error) {
    std::cerr << "profile_diff: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
