#pragma once
// Deploy export of an nn::Graph: the inference Job after passes, with every weight frozen into a
// constant, written with its weights to a directory that oneflow_lite loads without the model's
// code.
#include <map>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "job/export.pb.h"

namespace flow {

struct ExportOptions {
  // Names of the graph's inputs and outputs ("input_0", "output_0", ... when not given).
  ExportOptions& input_names(std::vector<std::string> names) {
    input_names_ = std::move(names);
    return *this;
  }
  ExportOptions& output_names(std::vector<std::string> names) {
    output_names_ = std::move(names);
    return *this;
  }
  std::vector<std::string> input_names_;
  std::vector<std::string> output_names_;
};

namespace graph {

struct InferenceExport {
  proto::ExportedModel model;
  std::map<std::string, Tensor> constants;  // by constant node name
};

// Traces the graph's build() again for inference (modules in eval mode, no optimizer; gradient
// ops a training build() emits are dead and removed), with the input metas of its first call
// (its first compiled signature, whatever plans later calls compiled: the steady-state batch,
// not a last partial one), freezes variables into constants, and runs the passes. The batch
// dimension is marked dynamic when a second trace at another batch size differs only in where
// the batch size appears.
// Throws flow::Error before the graph's first call.
InferenceExport export_inference(nn::Graph& graph, const ExportOptions& options = {});

// Writes the export into `dir` (see save below).
void write_export(const InferenceExport& exported, const std::string& dir);

}  // namespace graph

// Writes <dir>/model.pb (binary), <dir>/model.pbtxt (text, for people) and
// <dir>/weights.safetensors, creating dir's parents if needed. Crash-safe and atomic for readers:
// the files are written and fsynced in a hidden staging directory beside dir
// (".<name>.export-staging"), which is then swapped with dir in one rename (renameat2
// RENAME_EXCHANGE) or renamed to dir when there is none; the previous export is removed after.
// A process killed at any moment leaves dir holding the old or the new complete export. A
// directory holding anything but an export's files is not replaced (flow::Error). A global
// graph (laid out over ranks) exports the whole model: every rank calls save, the parameters are
// gathered, rank 0 writes, and every rank returns once the export is complete. A build() that
// moves values between placements itself (pipeline stages) cannot be traced locally.
void save(nn::Graph& graph, const std::string& dir, const ExportOptions& options = {});

}  // namespace flow
