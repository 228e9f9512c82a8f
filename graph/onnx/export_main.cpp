// flow_onnx_export: converts an export directory written by flow::save(graph, dir) to an ONNX
// model (opset 17), without the model's code.
// Usage: flow_onnx_export <export dir> <model.onnx>
#include <iostream>

#include "core/error.h"
#include "graph/onnx/onnx_export.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: flow_onnx_export <export dir> <model.onnx>\n";
    return 2;
  }
  try {
    flow::onnx::export_directory(argv[1], argv[2]);
  } catch (const flow::Error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  std::cout << "wrote " << argv[2] << " (ONNX opset " << flow::onnx::kOpsetVersion << ")\n";
  return 0;
}
