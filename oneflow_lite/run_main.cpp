// oneflow_lite_run: loads an export directory and runs it once (printing the outputs) or as a
// latency benchmark.
// Usage: oneflow_lite_run <dir> [--input FILE.safetensors] [--batch N] [--bench N] [--warmup N]
//   --input   tensors named after the model's inputs (safetensors, e.g. written by flow::save);
//             without it the inputs are random normal (floating) or zeros (integers)
//   --batch   the batch size of generated inputs (a model with a dynamic batch dimension)
//   --bench   runs N timed inferences after --warmup (default 10) and prints latency percentiles
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "core/flow.h"
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
  if (argc < 2 || !std::strcmp(argv[1], "--help")) {
    std::fprintf(stderr, "usage: %s <export dir> [--input FILE.safetensors] [--batch N] [--bench N] [--warmup N]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  std::string input_path;
  int64_t batch = 0, bench = 0, warmup = 10;
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", flag.c_str());
      return 2;
    }
    const char* value = argv[++i];
    if (flag == "--input") input_path = value;
    else if (flag == "--batch") batch = std::atoll(value);
    else if (flag == "--bench") bench = std::atoll(value);
    else if (flag == "--warmup") warmup = std::atoll(value);
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
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
    for (int64_t i = 0; i < bench; ++i) {
      const auto begin = Clock::now();
      model->run(inputs);
      latencies.push_back(micros_since(begin));
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
