#include "graph/export.h"

#include <fcntl.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>

#include "core/atomic_file.h"
#include "core/comm/process_group.h"
#include "core/serialization.h"
#include "graph/frozen_inference.h"
#include "graph/passes.h"

namespace flow {
namespace graph {
namespace {

namespace fs = std::filesystem;

struct Traced {
  proto::Job job;
  std::map<std::string, Tensor> fixed;
};

Traced trace_for_inference(nn::Graph& graph, const std::vector<TensorMeta>& input_metas) {
  Traced traced;
  traced.job = graph.trace_inference(input_metas, traced.fixed);
  for (const auto& node : traced.job.nodes()) {
    if (node.op() == kFeedOp) fail("export", graph.name(), ": the inference Job still reads the per-run value '", node.name(), "'");
  }
  // An export's weights are frozen, so constant folding computes what depends only on them
  // (folded conv + batch-norm weights) once, here.
  freeze_variables(traced.job);
  PassContext context{traced.fixed};
  default_passes().run(traced.job, context);
  return traced;
}

// The batch size shared by dim 0 of every input, if there is one.
std::optional<int64_t> common_batch(const std::vector<TensorMeta>& metas) {
  if (metas.empty()) return std::nullopt;
  std::optional<int64_t> batch;
  for (const auto& meta : metas) {
    if (meta.shape.ndim() == 0 || (batch && *batch != meta.shape[0])) return std::nullopt;
    batch = meta.shape[0];
  }
  return batch;
}

// Compares the Jobs traced at batch sizes a and b. They must match node for node except for
// integers that are m * a in the first and m * b in the second (the batch, or the batch times
// other dims, as when rows are flattened with tokens): those are recorded as batch slots with
// their multiple m (for attributes) or must be a dim of a value's shape. Returns false when
// anything else differs.
bool batch_slots(const proto::Job& first, const proto::Job& second, int64_t a, int64_t b, std::vector<proto::BatchSlot>& slots) {
  if (first.nodes_size() != second.nodes_size()) return false;
  auto differs_by_batch = [&](int64_t x, int64_t y) { return x == y || (x > 0 && x % a == 0 && y == x / a * b); };
  for (int i = 0; i < first.nodes_size(); ++i) {
    const proto::Node& n1 = first.nodes(i);
    const proto::Node& n2 = second.nodes(i);
    if (n1.name() != n2.name() || n1.op() != n2.op() || n1.inputs_size() != n2.inputs_size() || n1.outputs_size() != n2.outputs_size() ||
        n1.attrs_size() != n2.attrs_size()) {
      return false;
    }
    for (int k = 0; k < n1.inputs_size(); ++k) {
      if (n1.inputs(k) != n2.inputs(k)) return false;
    }
    for (int k = 0; k < n1.outputs_size(); ++k) {
      const proto::TensorDesc& d1 = n1.outputs(k);
      const proto::TensorDesc& d2 = n2.outputs(k);
      if (d1.dtype() != d2.dtype() || d1.device() != d2.device() || d1.shape_size() != d2.shape_size()) return false;
      for (int d = 0; d < d1.shape_size(); ++d) {
        if (!differs_by_batch(d1.shape(d), d2.shape(d))) return false;
      }
      if (n1.op() == kConstantOp && d1.SerializeAsString() != d2.SerializeAsString()) return false;
    }
    for (const auto& [key, v1] : n1.attrs()) {
      auto found = n2.attrs().find(key);
      if (found == n2.attrs().end()) return false;
      const proto::AttrValue& v2 = found->second;
      if (v1.has_ints() && v2.has_ints() && v1.ints().values_size() == v2.ints().values_size()) {
        for (int k = 0; k < v1.ints().values_size(); ++k) {
          const int64_t x = v1.ints().values(k), y = v2.ints().values(k);
          if (!differs_by_batch(x, y)) return false;
          if (x == y) continue;
          proto::BatchSlot& slot = slots.emplace_back();
          slot.set_node(n1.name());
          slot.set_attr(key);
          slot.set_index(k);
          if (x != a) slot.set_multiple(x / a);
        }
      } else if (v1.SerializeAsString() != v2.SerializeAsString()) {
        return false;
      }
    }
  }
  return true;
}

void add_io_specs(const proto::Job& job, const ExportOptions& options, bool dynamic, proto::ExportedModel& model) {
  std::map<int64_t, const proto::Node*> inputs, outputs;
  std::map<std::string, const proto::Node*> by_name;
  for (const auto& node : job.nodes()) {
    by_name[node.name()] = &node;
    if (node.op() == kInputOp) inputs[node.attrs().at("index").i()] = &node;
    if (node.op() == kOutputOp) outputs[node.attrs().at("index").i()] = &node;
  }
  auto add = [&](const std::map<int64_t, const proto::Node*>& nodes, const std::vector<std::string>& names, const char* kind,
                 google::protobuf::RepeatedPtrField<proto::IoSpec>& specs) {
    if (!names.empty() && names.size() != nodes.size()) {
      fail("export", names.size(), " ", kind, " names given for ", nodes.size(), " ", kind, "s");
    }
    for (const auto& [index, node] : nodes) {
      proto::IoSpec& spec = *specs.Add();
      spec.set_name(names.empty() ? std::string(kind) + "_" + std::to_string(index) : names[index]);
      spec.set_node(node->name());
      // An output node carries no desc of its own: its value's producer has it.
      const proto::TensorDesc* desc = &node->outputs(0);
      if (node->op() == kOutputOp) {
        const auto [producer, output] = parse_value_name(node->inputs(0));
        desc = &by_name.at(producer)->outputs(output);
      }
      spec.set_dtype(desc->dtype());
      for (int d = 0; d < desc->shape_size(); ++d) spec.add_shape(dynamic && d == 0 ? -1 : desc->shape(d));
    }
  };
  add(inputs, options.input_names_, "input", *model.mutable_inputs());
  add(outputs, options.output_names_, "output", *model.mutable_outputs());
  std::set<std::string> seen;
  for (const auto& spec : model.inputs()) {
    if (!seen.insert(spec.name()).second) fail("export", "the input name '", spec.name(), "' is used twice");
  }
  seen.clear();
  for (const auto& spec : model.outputs()) {
    if (!seen.insert(spec.name()).second) fail("export", "the output name '", spec.name(), "' is used twice");
  }
}

// Whether every graph output has the batch as dim 0 in both traces (which batch_slots found to
// match node for node).
bool outputs_follow_batch(const proto::Job& first, const proto::Job& second, int64_t a, int64_t b) {
  std::map<std::string, int> position;
  for (int i = 0; i < first.nodes_size(); ++i) position[first.nodes(i).name()] = i;
  for (int i = 0; i < first.nodes_size(); ++i) {
    if (first.nodes(i).op() != kOutputOp) continue;
    const auto [producer, index] = parse_value_name(first.nodes(i).inputs(0));
    const proto::TensorDesc& d1 = first.nodes(position.at(producer)).outputs(index);
    const proto::TensorDesc& d2 = second.nodes(position.at(producer)).outputs(index);
    if (d1.shape_size() == 0 || d1.shape(0) != a || d2.shape(0) != b) return false;
  }
  return true;
}

}  // namespace

InferenceExport export_inference(nn::Graph& graph, const ExportOptions& options) {
  if (!graph.is_compiled()) fail("export", graph.type_name(), " has not run yet: call the graph once so that its inputs are known");
  const std::vector<TensorMeta> metas = metas_of(graph.compiled_signature(0));
  Traced traced = trace_for_inference(graph, metas);
  InferenceExport out;
  proto::ExportedModel& model = out.model;
  model.set_format_version(1);  // 2 when a batch slot holds a multiple of the batch (below)
  model.set_name(graph.name());

  // A second trace at another batch size tells which integers are the batch size.
  std::vector<proto::BatchSlot> slots;
  bool dynamic = false;
  if (const auto batch = common_batch(metas)) {
    const int64_t other = *batch + 1;
    std::vector<TensorMeta> other_metas = metas;
    for (auto& meta : other_metas) {
      std::vector<int64_t> dims = meta.shape.vec();
      dims[0] = other;
      meta.shape = Shape(dims);
    }
    const Traced second = trace_for_inference(graph, other_metas);
    dynamic = batch_slots(traced.job, second.job, *batch, other, slots) && outputs_follow_batch(traced.job, second.job, *batch, other);
    model.set_batch_size(*batch);
  }
  add_io_specs(traced.job, options, dynamic, model);
  if (dynamic) {
    model.set_dynamic_batch(true);
    for (auto& slot : slots) {
      if (slot.multiple() > 1) model.set_format_version(kExportFormatVersion);
      *model.add_batch_slots() = std::move(slot);
    }
  }
  for (const auto& node : traced.job.nodes()) {
    if (node.op() == kConstantOp) out.constants[node.name()] = traced.fixed.at(node.name());
  }
  traced.job.set_version(kJobVersion);
  *model.mutable_job() = std::move(traced.job);
  return out;
}

namespace {

constexpr const char* kExportFiles[] = {"model.pb", "model.pbtxt", "weights.safetensors"};

// Swaps two directory entries in one step (Linux renameat2). Returns false when the file system
// cannot (EINVAL: e.g. some network file systems).
bool exchange(const fs::path& a, const fs::path& b) {
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) return true;
  if (errno == EINVAL) return false;
  fail("export", "cannot exchange ", a.string(), " and ", b.string(), ": ", std::strerror(errno));
}

void rename_or_fail(const fs::path& from, const fs::path& to) {
  std::error_code error;
  fs::rename(from, to, error);
  if (error) fail("export", "cannot rename ", from.string(), " to ", to.string(), ": ", error.message());
}

}  // namespace

void write_export(const InferenceExport& exported, const std::string& dir) {
  fs::path target = fs::absolute(dir).lexically_normal();
  if (target.filename().empty()) target = target.parent_path();
  const fs::path parent = target.parent_path();
  // Beside the target, hidden: a model repository skips names starting with "." (and versions
  // are numbers), so a server never sees a half-written export.
  const fs::path staging = parent / ("." + target.filename().string() + ".export-staging");
  std::error_code error;
  if (fs::exists(target, error)) {
    if (!fs::is_directory(target, error)) fail("export", dir, " exists and is not a directory");
    // The export replaces the whole directory: never take anything else with it.
    for (const auto& entry : fs::directory_iterator(target, error)) {
      const std::string name = entry.path().filename().string();
      if (std::find(std::begin(kExportFiles), std::end(kExportFiles), name) == std::end(kExportFiles)) {
        fail("export", dir, " holds '", name, "', which is not part of an export; export into an empty or new directory");
      }
    }
    if (error) fail("export", "cannot list ", dir, ": ", error.message());
  }
  fs::create_directories(parent, error);
  if (error) fail("export", "cannot create ", parent.string(), ": ", error.message());
  fs::remove_all(staging, error);  // what an export killed part way left
  if (error || !fs::create_directory(staging, error)) fail("export", "cannot create ", staging.string(), ": ", error.message());

  std::string binary;
  if (!exported.model.SerializeToString(&binary)) fail("export", "cannot serialize the model of ", dir);
  write_file_atomically((staging / "model.pb").string(), binary, "export");
  std::string text;
  google::protobuf::TextFormat::PrintToString(exported.model, &text);
  write_file_atomically((staging / "model.pbtxt").string(), text, "export");
  StateDict weights;
  for (const auto& [name, tensor] : exported.constants) weights.insert(name, tensor.contiguous());
  weights.metadata()["format"] = "flow-export";
  flow::save(weights, (staging / "weights.safetensors").string());

  if (!fs::exists(target)) {
    rename_or_fail(staging, target);
    sync_directory(parent.string(), "export");
    return;
  }
  if (exchange(staging, target)) {
    sync_directory(parent.string(), "export");
    fs::remove_all(staging);  // now the previous export
    return;
  }
  // Without an atomic exchange there is a moment with no directory at `dir`: the previous export
  // waits under a second hidden name until the new one is in place.
  const fs::path previous = parent / ("." + target.filename().string() + ".export-previous");
  fs::remove_all(previous);
  rename_or_fail(target, previous);
  rename_or_fail(staging, target);
  sync_directory(parent.string(), "export");
  fs::remove_all(previous);
}

}  // namespace graph

void save(nn::Graph& graph, const std::string& dir, const ExportOptions& options) {
  if (!graph.is_global()) {
    graph::write_export(graph::export_inference(graph, options), dir);
    return;
  }
  // Every rank gathers the model with the others; rank 0 writes, and all return once it has.
  const graph::InferenceExport exported = graph::export_inference(graph, options);
  if (distributed::get_rank() == 0) graph::write_export(exported, dir);
  distributed::process_group("save").barrier({});
}

}  // namespace flow
