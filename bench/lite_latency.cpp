// Latency of one oneflow_lite inference, for bench/ort_bench.sh (its ONNX Runtime twin is
// bench/ort/ort_bench.js, which takes the same arguments and prints the same line). Loads an
// export directory (or, with --graph-model NAME, builds that model of bench/ort_models.h with the
// weights of its export and times the inference nn::Graph instead, frozen as Graph inference runs
// by default: graph/frozen_inference.h), reads the input from a raw float32 file of shape
// (batch, C, H, W) (`--image C,H,W`, 1,28,28 by default), runs
// `--warmup` inferences, then times single inferences (steady clock around Model::run) until
// both `--min-time` seconds and `--min-iters` samples are reached, and prints one line:
//   median_ms=<median> min_ms=<min> max_ms=<max> iters=<n>
// `--output` writes the last output (raw float32) for comparing with ONNX Runtime's. With
// `--graph-model NAME --amp` the Graph runs with bfloat16 AMP (`config().enable_amp()`), as the
// `<model>_bf16` exports of bench/ort_bench.sh were made.
// Profiling: `--min-time 0 --min-iters N` runs exactly N timed inferences; the line
// "lite_latency: timed" is printed (and flushed) before them, so that ONEDNN_VERBOSE output of
// the timed calls can be told from that of the load and warm-up.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "bench/ort_models.h"
#include "cli/cli.h"
#include "core/flow.h"
#include "oneflow_lite/model.h"
#include "tests/common/graphs.h"

int main(int argc, char** argv) {
  CLI::App app("Median latency of oneflow_lite inferences of an export on an input file.", "lite_latency");
  std::string dir, input, output, graph_model;
  int64_t batch = 1, threads = 1, warmup = 10, min_iters = 20;
  double min_time = 1.0;
  app.add_option("export_dir", dir, "the export directory (flow::save); ignored with --graph-model")->required();
  app.add_option("input", input, "raw float32 input of shape (batch, C, H, W)")->required();
  std::vector<int64_t> image{1, 28, 28};
  app.add_option("--image", image, "one input row's shape C,H,W")->delimiter(',')->expected(3)->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  app.add_option("--batch", batch, "the batch size")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--threads", threads, "kernel threads (flow::set_num_threads)")->check(CLI::Range(int64_t{1}, int64_t{1024}));
  app.add_option("--warmup", warmup, "untimed inferences first")->check(CLI::NonNegativeNumber);
  app.add_option("--min-time", min_time, "seconds of timed inferences at least")->check(CLI::NonNegativeNumber);
  app.add_option("--min-iters", min_iters, "timed inferences at least")->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--output", output, "write the last output here (raw float32)");
  app.add_option("--graph-model", graph_model, "time the inference nn::Graph of this model of bench/ort_models.h instead of lite");
  bool plain_layouts = false, amp = false;
  app.add_flag("--amp", amp, "with --graph-model: the Graph with bfloat16 AMP (config().enable_amp())");
  app.add_flag("--plain-layouts", plain_layouts, "every op on plain NCHW with its own kernel (lite::LoadOptions::blocked_layouts(false); with --graph-model the Graph unfrozen)");
  if (const auto status = flow::cli::parse(app, argc, argv)) return *status;

  flow::set_num_threads(static_cast<int>(threads));
  const flow::Tensor x = flow::empty({batch, image[0], image[1], image[2]});
  {
    std::ifstream file(input, std::ios::binary);
    file.read(reinterpret_cast<char*>(x.data_ptr<float>()), static_cast<std::streamsize>(x.numel() * sizeof(float)));
    if (!file || file.peek() != std::char_traits<char>::eof()) {
      std::fprintf(stderr, "lite_latency: %s does not hold exactly %lld floats\n", input.c_str(), static_cast<long long>(x.numel()));
      return 1;
    }
  }
  std::function<flow::TensorList()> infer;
  if (graph_model.empty()) {
    const auto model = flow::lite::Model::load(dir, flow::lite::LoadOptions().blocked_layouts(!plain_layouts));
    infer = [model, x] { return model->run({x}); };
  } else {
    const bench::OrtModel* model = bench::find_ort_model(graph_model.c_str());
    if (!model) {
      std::fprintf(stderr, "lite_latency: no model '%s' in bench/ort_models.h\n", graph_model.c_str());
      return 1;
    }
    flow::manual_seed(0);
    auto graph = std::make_shared<test_graphs::PredictGraph>(model->make());
    graph->config().enable_inference_freezing(!plain_layouts);
    if (amp) graph->config().enable_amp();
    infer = [graph, x] { return (*graph)(x); };
  }
  flow::TensorList out;
  for (int64_t i = 0; i < warmup; ++i) out = infer();
  std::printf("lite_latency: timed\n");
  std::fflush(stdout);
  std::vector<double> samples;
  using Clock = std::chrono::steady_clock;
  const auto begin = Clock::now();
  while (static_cast<int64_t>(samples.size()) < min_iters || std::chrono::duration<double>(Clock::now() - begin).count() < min_time) {
    const auto start = Clock::now();
    out = infer();
    samples.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  const double median = n % 2 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
  std::printf("median_ms=%.6f min_ms=%.6f max_ms=%.6f iters=%zu\n", median, samples.front(), samples.back(), n);
  if (!output.empty()) {
    const flow::Tensor y = out.at(0).to(flow::kFloat32).contiguous();  // a bfloat16 export's too
    std::ofstream file(output, std::ios::binary);
    file.write(reinterpret_cast<const char*>(y.data_ptr<float>()), static_cast<std::streamsize>(y.numel() * sizeof(float)));
  }
  return 0;
}
