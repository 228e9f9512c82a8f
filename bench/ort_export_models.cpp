// Writes the models of bench/ort_bench.sh (oneflow_lite vs ONNX Runtime), untrained, twice each:
// as a deploy export for oneflow_lite (<out>/<model>/, flow::save) and as ONNX through flow's own
// exporter (<out>/<model>.onnx, flow::onnx::export_model), both from the same inference Graph and
// with a dynamic batch. Models: "relu" (one ReLU: the per-call floor of each runtime), "mlp" (the
// quickstart MLP of bench/bench_models.h), "cnn" (the LeNet-style CNN of bench/bench_models.h),
// "resnet" (the ResNet-style net of tests/common/models.h: residual blocks, batch norm folded into
// the convs, global average pooling). The models with products are also exported with bfloat16
// AMP (config().enable_amp(): bfloat16 weights, products in bfloat16) as <out>/<model>_bf16/ for
// oneflow_lite (ONNX Runtime's CPU provider runs them in float32). Also writes the inputs both runtimes read:
// <out>/input_b<batch>.bin, raw float32 (batch, 1, 28, 28), uniform [0, 1), seed 0.
// Usage: ort_export_models <out> [--batches 1,64]
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench/ort_models.h"
#include "cli/cli.h"
#include "core/flow.h"
#include "graph/export.h"
#include "graph/onnx/onnx_export.h"
#include "tests/common/graphs.h"

int main(int argc, char** argv) {
  CLI::App app("Writes the models of bench/ort_bench.sh as oneflow_lite exports (<out>/<model>/) and as ONNX\n"
               "(<out>/<model>.onnx), and their random inputs (<out>/input_b<batch>.bin).",
               "ort_export_models");
  std::string out;
  std::vector<int64_t> batches{1, 64};
  app.add_option("out", out, "the directory to write into")->required();
  app.add_option("--batches", batches, "the batch sizes to write inputs for")->delimiter(',');
  if (const auto status = flow::cli::parse(app, argc, argv)) return *status;
  std::filesystem::create_directories(out);
  for (const auto& [name, make] : bench::ort_models()) {
    flow::manual_seed(0);
    test_graphs::PredictGraph graph(make());
    graph(flow::rand({2, 1, 28, 28}));
    const auto options = flow::ExportOptions().input_names({"image"}).output_names({"logits"});
    const std::filesystem::path dir = std::filesystem::path(out) / name;
    flow::save(graph, dir.string(), options);
    const std::string onnx = (std::filesystem::path(out) / (std::string(name) + ".onnx")).string();
    flow::onnx::export_model(graph, onnx, options);
    std::printf("%s %s\n", dir.c_str(), onnx.c_str());
    if (std::string(name) == "relu") continue;
    flow::manual_seed(0);
    test_graphs::PredictGraph amp_graph(make());
    amp_graph.config().enable_amp();
    amp_graph(flow::rand({2, 1, 28, 28}));
    const std::filesystem::path amp_dir = std::filesystem::path(out) / (std::string(name) + "_bf16");
    flow::save(amp_graph, amp_dir.string(), options);
    std::printf("%s\n", amp_dir.c_str());
  }
  for (const int64_t batch : batches) {
    flow::manual_seed(0);
    const flow::Tensor x = flow::rand({batch, 1, 28, 28}).contiguous();
    const std::string path = (std::filesystem::path(out) / ("input_b" + std::to_string(batch) + ".bin")).string();
    std::ofstream file(path, std::ios::binary);
    file.write(reinterpret_cast<const char*>(x.data_ptr<float>()), static_cast<std::streamsize>(x.numel() * sizeof(float)));
    if (!file) {
      std::fprintf(stderr, "ort_export_models: cannot write %s\n", path.c_str());
      return 1;
    }
    std::printf("%s\n", path.c_str());
  }
  return 0;
}
