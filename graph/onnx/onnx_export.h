#pragma once
// ONNX export: the inference Job of a deploy export (graph/export.h), converted to an ONNX model
// at opset 17. Inputs and outputs keep the export's names; with a dynamic batch, dim 0 of every
// input and output is the symbolic dim "batch". Weights become initializers. An op without an
// ONNX mapping throws flow::Error naming the op and its node.
#include <map>
#include <string>

#include "graph/export.h"
#include "graph/onnx/onnx.pb.h"

namespace flow::onnx {

inline constexpr int64_t kOpsetVersion = 17;
inline constexpr int64_t kIrVersion = 8;  // the IR version of opset 17 (ONNX 1.12)

// Converts a deploy export and its weights (by constant node name) to an ONNX model.
::onnx::ModelProto to_onnx(const graph::proto::ExportedModel& model, const std::map<std::string, Tensor>& constants);

// Exports the graph's inference Job (graph::export_inference: the graph must have run once) to
// an ONNX file.
void export_model(nn::Graph& graph, const std::string& path, const ExportOptions& options = {});

// Converts the export directory written by flow::save(graph, dir) (model.pb and
// weights.safetensors) to an ONNX file, without the model's code.
void export_directory(const std::string& export_dir, const std::string& path);

}  // namespace flow::onnx
