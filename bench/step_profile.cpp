// Where a training step's time goes: runs steps of one case of bench/train_graph.h (eager, the
// Graph, or the Graph with bfloat16 AMP) under flow::profiler and prints the per-op averages, so a
// machine without perf (the GPU machine's Xeon) can still be read op by op.
//   flow_step_profile --case mlp_b64 --mode graph_amp --threads 4 --steps 100 [--trace t.json]
#include <cstdio>
#include <string>

#include "bench/train_graph.h"
#include "cli/cli.h"
#include "core/flow.h"
#include "core/profiler.h"

int main(int argc, char** argv) {
  CLI::App app{"Profiles training steps of a benchmark case op by op"};
  std::string case_name = "mlp_b64", mode = "graph", sort_by = "total", trace_path;
  int threads = 1, steps = 50, warmup = 5, rows = 25;
  std::vector<std::string> case_names;
  for (const bench::TrainCase& c : bench::kTrainCases) case_names.emplace_back(c.name);
  app.add_option("--case", case_name, "the case")->check(CLI::IsMember(case_names));
  app.add_option("--mode", mode, "eager, graph or graph_amp")->check(CLI::IsMember({"eager", "graph", "graph_amp"}));
  app.add_option("--threads", threads, "intra-op threads")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "profiled steps")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "steps run before profiling (a Graph compiles on the first)")->check(CLI::NonNegativeNumber);
  app.add_option("--sort", sort_by, "table order")->check(CLI::IsMember({"total", "self", "calls", "average", "flops"}));
  app.add_option("--rows", rows, "table rows, -1 for all");
  app.add_option("--trace", trace_path, "also write a Chrome trace of the profiled steps");
  if (const auto status = flow::cli::parse(app, argc, argv)) return *status;

  const bench::TrainCase* chosen = nullptr;
  for (const bench::TrainCase& c : bench::kTrainCases) chosen = case_name == c.name ? &c : chosen;
  flow::set_num_threads(threads);
  flow::manual_seed(0);
  auto model = chosen->make();
  const flow::Tensor x = flow::rand({chosen->batch, 1, 28, 28}), y = flow::randint(0, 10, {chosen->batch});
  auto optimizer = std::make_shared<flow::optim::SGD>(model->parameters(), flow::optim::SGDOptions(1e-3));
  test_graphs::TrainGraph train_graph(model, optimizer);
  train_graph.config().enable_amp(mode == "graph_amp");
  flow::nn::CrossEntropyLoss loss_fn;
  auto step = [&] {
    if (mode != "eager") return train_graph(x, y).at(0);
    flow::Tensor loss = loss_fn(model->forward(x), y);
    optimizer->zero_grad();
    loss.backward();
    optimizer->step();
    return loss;
  };
  for (int i = 0; i < warmup; ++i) step();

  flow::profiler::Profile profile;
  const auto start = flow::profiler::Clock::now();
  flow::Tensor loss;
  for (int i = 0; i < steps; ++i) {
    loss = step();
    profile.step();
  }
  const double step_us = std::chrono::duration<double, std::micro>(flow::profiler::Clock::now() - start).count() / steps;
  profile.stop();
  std::printf("%s %s, %d thread(s): %.1f us per profiled step (%d steps), loss %.6f\n", case_name.c_str(), mode.c_str(), threads,
              step_us, steps, loss.item<float>());
  std::printf("%s", profile.key_averages().table(sort_by, rows).c_str());
  if (!trace_path.empty()) profile.export_chrome_trace(trace_path);
  return 0;
}
