// flow_onnx_export: converts an export directory written by flow::save(graph, dir) to an ONNX
// model (opset 17), without the model's code.
// Usage: flow_onnx_export <export dir> <model.onnx>
#include <iostream>
#include <string>

#include "cli/cli.h"
#include "core/error.h"
#include "graph/onnx/onnx_export.h"

int main(int argc, char** argv) {
  CLI::App app("Converts an export directory written by flow::save(graph, dir) to an ONNX model (opset " +
                   std::to_string(flow::onnx::kOpsetVersion) + ").",
               "flow_onnx_export");
  std::string export_dir, onnx_path;
  app.add_option("export_dir", export_dir, "the export directory (model.pb, weights.safetensors)")
      ->required()
      ->check(CLI::ExistingDirectory);
  app.add_option("model.onnx", onnx_path, "the ONNX file to write")->required();
  if (const auto status = flow::cli::parse(app, argc, argv)) return *status;
  try {
    flow::onnx::export_directory(export_dir, onnx_path);
  } catch (const flow::Error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  std::cout << "wrote " << onnx_path << " (ONNX opset " << flow::onnx::kOpsetVersion << ")\n";
  return 0;
}
