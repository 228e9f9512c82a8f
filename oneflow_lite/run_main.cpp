// oneflow_lite_run: loads an export directory and runs it once (printing the outputs) or as a
// latency benchmark.
// Usage: oneflow_lite_run <dir> [--input FILE.safetensors] [--batch N] [--bench N] [--warmup N]
//                         [--threads N] [--profile] [--trace FILE.json]
// (`oneflow_lite_run --help` says what each does).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "core/flow.h"
#include "core/profiler.h"
#include "oneflow_lite/model.h"

namespace {

using Clock = std::chrono::steady_clock;

double micros_since(Clock::time_point start) { return std::chrono::duration<double, std::micro>(Clock::now() - start).count(); }

flow::TensorList make_inputs(const flow::lite::Model& model, const std::string& path, int64_t batch) {
  flow::TensorList inputs;
  if (!path.empty()) {
    const flow::StateDict given = flow::load(path);
    for (const auto& spec : model.inputs()) {
      if (!given.contains(spec.name)) flow::fail("oneflow_lite_run", path, " has no tensor named '", spec.name, "'");
      inputs.push_back(given.at(spec.name));
    }
    return inputs;
  }
  for (const auto& spec : model.inputs()) {
    std::vector<int64_t> dims = spec.shape;
    if (!dims.empty() && dims[0] == -1) dims[0] = batch > 0 ? batch : model.exported_batch();
    const flow::TensorOptions options(spec.dtype);
    inputs.push_back(flow::is_floating(spec.dtype) ? flow::randn(flow::Shape(dims), options) : flow::zeros(flow::Shape(dims), options));
  }
  return inputs;
}

void print_specs(const char* kind, const std::vector<flow::lite::TensorSpec>& specs) {
  for (const auto& spec : specs) {
    std::printf("%s %s: %s (", kind, spec.name.c_str(), flow::dtype_name(spec.dtype).c_str());
    for (size_t d = 0; d < spec.shape.size(); ++d) std::printf("%s%lld", d ? ", " : "", static_cast<long long>(spec.shape[d]));
    std::printf(")\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Loads an export directory (written by flow::save(graph, dir)) and runs it once, printing the\n"
               "outputs, or with --bench as a latency benchmark.",
               "oneflow_lite_run");
  std::string dir, input_path;
  int64_t batch = 0, bench = 0, warmup = 10;
  app.add_option("dir", dir, "the export directory")->required()->check(CLI::ExistingDirectory);
  app.add_option("--input", input_path,
                 "tensors named after the model's inputs (safetensors, e.g. written by flow::save);\n"
                 "without it the inputs are random normal (floating) or zeros (integers)")
      ->check(CLI::ExistingFile);
  app.add_option("--batch", batch, "the batch size of generated inputs (default: the exported batch)")
      ->check(flow::cli::at_least<int64_t>(1));
  CLI::Option* bench_option = app.add_option("--bench", bench, "run N timed inferences after --warmup and print latency percentiles")
                                 ->check(flow::cli::at_least<int64_t>(1));
  app.add_option("--warmup", warmup, "untimed inferences before --bench")->check(flow::cli::at_least<int64_t>(0))->capture_default_str();
  int64_t threads = 0;
  app.add_option("--threads", threads, "kernel threads (flow::set_num_threads; default: FLOW_NUM_THREADS or the machine's cores)")
      ->check(flow::cli::at_least<int64_t>(1));
  bool profile = false;
  std::string trace_path;
  app.add_flag("--profile", profile, "with --bench: print each op's share of the timed runs (flow::profiler, one event per step)")
      ->needs(bench_option);
  app.add_option("--trace", trace_path, "with --bench: write the timed runs' steps as a Chrome trace (implies --profile)")
      ->needs(bench_option);
  if (const auto status = flow::cli::parse(app, argc, argv)) return *status;
  if (!trace_path.empty()) profile = true;
  if (threads > 0) flow::set_num_threads(static_cast<int>(threads));
  try {
    const auto start = Clock::now();
    const auto model = flow::lite::Model::load(dir);
    const double load_us = micros_since(start);
    std::printf("model %s loaded in %.1f ms (%s batch, exported at %lld)\n", model->name().c_str(), load_us / 1000,
                model->dynamic_batch() ? "dynamic" : "static", static_cast<long long>(model->exported_batch()));
    print_specs("input", model->inputs());
    print_specs("output", model->outputs());
    const flow::TensorList inputs = make_inputs(*model, input_path, batch);
    if (bench <= 0) {
      const flow::TensorList outputs = model->run(inputs);
      for (size_t i = 0; i < outputs.size(); ++i) std::cout << model->outputs()[i].name << " = " << outputs[i] << "\n";
      return 0;
    }
    for (int64_t i = 0; i < warmup; ++i) model->run(inputs);
    std::vector<double> latencies;
    std::optional<flow::profiler::Profile> profiler;
    if (profile) profiler.emplace(flow::profiler::ProfileOptions().record_shapes(false));
    for (int64_t i = 0; i < bench; ++i) {
      const auto begin = Clock::now();
      model->run(inputs);
      latencies.push_back(micros_since(begin));
    }
    if (profiler) {
      profiler->stop();
      std::printf("%s", profiler->key_averages().table("total").c_str());
      if (!trace_path.empty()) profiler->export_chrome_trace(trace_path);
    }
    std::sort(latencies.begin(), latencies.end());
    auto percentile = [&](double p) { return latencies[static_cast<size_t>(p * static_cast<double>(latencies.size() - 1))]; };
    double total = 0;
    for (double l : latencies) total += l;
    std::printf("latency over %lld runs (us): p50 %.1f  p90 %.1f  p99 %.1f  mean %.1f\n", static_cast<long long>(bench), percentile(0.5),
                percentile(0.9), percentile(0.99), total / static_cast<double>(latencies.size()));
  } catch (const flow::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
