// Writes the models of bench/ort_bench.sh (oneflow_lite vs ONNX Runtime), untrained, twice each:
// as a deploy export for oneflow_lite (<out>/<model>/, flow::save) and as ONNX through flow's own
// exporter (<out>/<model>.onnx, flow::onnx::export_model), both from the same inference Graph and
// with a dynamic batch. Models (bench/ort_models.h): "relu" (one ReLU: the per-call floor of each
// runtime), "mlp" (the quickstart MLP of bench/bench_models.h), "cnn" (the LeNet-style CNN of
// bench/bench_models.h), "resnet" (the ResNet-style net of tests/common/models.h: residual blocks,
// batch norm folded into the convs, global average pooling), all on (1, 28, 28) images; and
// "resnet18", "resnet50", "mobilenet_v2" of flow::vision::models (random weights, 1000 classes)
// on (3, 224, 224) images. The models with products are also exported with bfloat16 AMP
// (config().enable_amp(): bfloat16 weights, products in bfloat16) as <out>/<model>_bf16/ for
// oneflow_lite (ONNX Runtime's CPU provider runs them in float32). Also writes the inputs both
// runtimes read, for each image shape of the models written and each batch:
// <out>/input_<C>x<H>x<W>_b<batch>.bin, raw float32 (batch, C, H, W), uniform [0, 1), seed 0.
// Usage: ort_export_models <out> [--models relu,mlp,cnn,resnet] [--batches 1,64] [--no-bf16]
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "bench/ort_models.h"
#include "cli/cli.h"
#include "core/flow.h"
#include "graph/export.h"
#include "graph/onnx/onnx_export.h"
#include "tests/common/graphs.h"

namespace {

flow::Shape batched(int64_t batch, const flow::Shape& image) { return {batch, image[0], image[1], image[2]}; }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Writes the models of bench/ort_bench.sh as oneflow_lite exports (<out>/<model>/) and as ONNX\n"
               "(<out>/<model>.onnx), and their random inputs (<out>/input_<C>x<H>x<W>_b<batch>.bin).",
               "ort_export_models");
  std::string out;
  std::vector<std::string> names{"relu", "mlp", "cnn", "resnet"};
  std::vector<int64_t> batches{1, 64};
  bool no_bf16 = false;
  app.add_option("out", out, "the directory to write into")->required();
  app.add_option("--models", names, "the models of bench/ort_models.h to write")->delimiter(',');
  app.add_option("--batches", batches, "the batch sizes to write inputs for")->delimiter(',');
  app.add_flag("--no-bf16", no_bf16, "write no bfloat16 AMP exports");
  if (const auto status = flow::cli::parse(app, argc, argv)) return *status;
  std::vector<const bench::OrtModel*> models;
  for (const std::string& name : names) {
    const bench::OrtModel* model = bench::find_ort_model(name.c_str());
    if (!model) {
      std::fprintf(stderr, "ort_export_models: no model '%s' in bench/ort_models.h\n", name.c_str());
      return 2;
    }
    models.push_back(model);
  }
  std::filesystem::create_directories(out);
  std::set<std::vector<int64_t>> images;
  for (const bench::OrtModel* model : models) {
    const std::string name = model->name;
    images.insert(std::vector<int64_t>(model->image.begin(), model->image.end()));
    flow::manual_seed(0);
    test_graphs::PredictGraph graph(model->make());
    graph(flow::rand(batched(2, model->image)));
    const auto options = flow::ExportOptions().input_names({"image"}).output_names({"logits"});
    const std::filesystem::path dir = std::filesystem::path(out) / name;
    flow::save(graph, dir.string(), options);
    const std::string onnx = (std::filesystem::path(out) / (name + ".onnx")).string();
    flow::onnx::export_model(graph, onnx, options);
    std::printf("%s %s\n", dir.c_str(), onnx.c_str());
    if (name == "relu" || no_bf16) continue;
    flow::manual_seed(0);
    test_graphs::PredictGraph amp_graph(model->make());
    amp_graph.config().enable_amp();
    amp_graph(flow::rand(batched(2, model->image)));
    const std::filesystem::path amp_dir = std::filesystem::path(out) / (name + "_bf16");
    flow::save(amp_graph, amp_dir.string(), options);
    std::printf("%s\n", amp_dir.c_str());
  }
  for (const std::vector<int64_t>& image : images) {
    for (const int64_t batch : batches) {
      flow::manual_seed(0);
      const flow::Tensor x = flow::rand(batched(batch, flow::Shape(image.begin(), image.end()))).contiguous();
      const std::string file_name = "input_" + std::to_string(image[0]) + "x" + std::to_string(image[1]) + "x" + std::to_string(image[2]) +
                                    "_b" + std::to_string(batch) + ".bin";
      const std::string path = (std::filesystem::path(out) / file_name).string();
      std::ofstream file(path, std::ios::binary);
      file.write(reinterpret_cast<const char*>(x.data_ptr<float>()), static_cast<std::streamsize>(x.numel() * sizeof(float)));
      if (!file) {
        std::fprintf(stderr, "ort_export_models: cannot write %s\n", path.c_str());
        return 1;
      }
      std::printf("%s\n", path.c_str());
    }
  }
  return 0;
}
