#include "graph/onnx/onnx_export.h"

#include <glog/logging.h>

#include <filesystem>
#include <fstream>

#include "core/serialization.h"
#include "graph/onnx/op_converters.h"

namespace flow::onnx {
namespace {

namespace proto = graph::proto;

// The symbolic name of dim 0 of every input and output when the batch is dynamic.
constexpr const char* kBatchDim = "batch";

void describe_io(const proto::IoSpec& spec, ::onnx::ValueInfoProto& info) {
  info.set_name(spec.name());
  auto& tensor = *info.mutable_type()->mutable_tensor_type();
  tensor.set_elem_type(onnx_type(dtype_from_name(spec.dtype())));
  auto& shape = *tensor.mutable_shape();
  for (int64_t size : spec.shape()) {
    auto& dim = *shape.add_dim();
    if (size < 0) {
      dim.set_dim_param(kBatchDim);
    } else {
      dim.set_dim_value(size);
    }
  }
}

// Walks the Job in order, giving every value an ONNX name.
class Converter {
 public:
  Converter(const proto::ExportedModel& model, const std::map<std::string, Tensor>& constants, ::onnx::GraphProto& graph)
      : model_(model), constants_(constants), graph_(graph), builder_(graph) {}

  void run() {
    graph_.set_name(model_.name().empty() ? "flow" : model_.name());
    for (const auto& spec : model_.inputs()) add_io(spec, "input", input_specs_, *graph_.add_input());
    for (const auto& spec : model_.outputs()) add_io(spec, "output", output_specs_, *graph_.add_output());
    if (model_.dynamic_batch()) {
      for (const auto& slot : model_.batch_slots()) batch_slots_[slot.node()][slot.attr()].insert(slot.index());
    }
    for (const auto& node : model_.job().nodes()) convert(node);
  }

 private:
  void add_io(const proto::IoSpec& spec, const char* kind, std::map<std::string, const proto::IoSpec*>& by_node,
              ::onnx::ValueInfoProto& info) {
    if (!builder_.reserve(spec.name())) fail("onnx_export", "the ", kind, " name '", spec.name(), "' is already taken by another input or output");
    by_node[spec.node()] = &spec;
    describe_io(spec, info);
  }

  const proto::IoSpec& spec_of(const proto::Node& node, const std::map<std::string, const proto::IoSpec*>& specs) const {
    auto found = specs.find(node.name());
    if (found == specs.end()) fail("onnx_export", "the Job's ", node.op(), " node '", node.name(), "' has no entry in the export's ", node.op(), "s");
    return *found->second;
  }

  // The ONNX value of a Job value read by `reader`.
  const std::string& resolve(const std::string& value, const proto::Node& reader) const {
    auto found = names_.find(value);
    if (found == names_.end()) fail("onnx_export", "node '", reader.name(), "' reads an unknown value '", value, "'");
    if (found->second.empty()) {
      const std::string producer = graph::parse_value_name(value).first;
      fail("onnx_export", "node '", reader.name(), "' (op '", reader.op(), "') reads '", value, "', an output of op '", producers_.at(producer),
           "' that has no ONNX equivalent");
    }
    return found->second;
  }

  void convert(const proto::Node& node) {
    const std::string& op = node.op();
    producers_[node.name()] = op;
    if (graph::is_source_kind(op) && node.outputs_size() == 1) metas_[graph::value_name(node.name(), 0)] = graph::meta_of(node.outputs(0));
    if (op == graph::kInputOp) {
      names_[graph::value_name(node.name(), 0)] = spec_of(node, input_specs_).name();
    } else if (op == graph::kConstantOp) {
      auto weight = constants_.find(node.name());
      if (weight == constants_.end()) fail("onnx_export", "missing weight for constant node '", node.name(), "'");
      const TensorMeta expected = graph::meta_of(node.outputs(0));
      if (!(weight->second.shape() == expected.shape) || weight->second.dtype() != expected.dtype) {
        fail("onnx_export", "weight '", node.name(), "' does not match its constant node (", graph::describe_str(node.outputs(0)), ")");
      }
      names_[graph::value_name(node.name(), 0)] = builder_.add_initializer(node.name(), weight->second);
    } else if (op == graph::kOutputOp) {
      builder_.set_scope(node.name());
      builder_.add_named("Identity", {resolve(node.inputs(0), node)}, spec_of(node, output_specs_).name());
    } else if (graph::is_source_kind(op)) {
      fail("onnx_export", "node '", node.name(), "' is a ", op, " node: only deploy exports (frozen weights, no per-run values) convert to ONNX");
    } else {
      convert_op(node);
    }
  }

  void convert_op(const proto::Node& node) {
    JobNode job_node{node, graph::attrs_of(node), {}, {}, {}, {}};
    for (const auto& input : node.inputs()) {
      job_node.inputs.push_back(resolve(input, node));
      job_node.input_metas.push_back(metas_.at(input));
    }
    for (const auto& output : node.outputs()) job_node.output_metas.push_back(graph::meta_of(output));
    if (auto slots = batch_slots_.find(node.name()); slots != batch_slots_.end()) job_node.batch_slots = slots->second;
    const std::vector<std::string> outputs = convert_node(builder_, job_node);
    CHECK_EQ(static_cast<int>(outputs.size()), node.outputs_size()) << "converter of " << node.op();
    for (int i = 0; i < node.outputs_size(); ++i) {
      const std::string value = graph::value_name(node.name(), i);
      names_[value] = outputs[i];
      metas_[value] = job_node.output_metas[i];
    }
  }

  const proto::ExportedModel& model_;
  const std::map<std::string, Tensor>& constants_;
  ::onnx::GraphProto& graph_;
  GraphBuilder builder_;
  std::map<std::string, const proto::IoSpec*> input_specs_, output_specs_;  // by Job node
  std::map<std::string, std::map<std::string, std::set<int>>> batch_slots_;  // node -> attr -> indices
  std::map<std::string, std::string> names_;                                 // Job value -> ONNX value
  std::map<std::string, TensorMeta> metas_;                                  // Job value -> meta
  std::map<std::string, std::string> producers_;                             // Job node -> op
};

void write(const ::onnx::ModelProto& model, const std::string& path) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file || !model.SerializeToOstream(&file)) fail("onnx_export", "cannot write ", path);
}

}  // namespace

::onnx::ModelProto to_onnx(const graph::proto::ExportedModel& model, const std::map<std::string, Tensor>& constants) {
  ::onnx::ModelProto out;
  out.set_ir_version(kIrVersion);
  out.set_producer_name("flow");
  auto& opset = *out.add_opset_import();
  opset.set_domain("");
  opset.set_version(kOpsetVersion);
  Converter converter(model, constants, *out.mutable_graph());
  converter.run();
  return out;
}

void export_model(nn::Graph& graph, const std::string& path, const ExportOptions& options) {
  const graph::InferenceExport exported = graph::export_inference(graph, options);
  write(to_onnx(exported.model, exported.constants), path);
}

void export_directory(const std::string& export_dir, const std::string& path) {
  const std::filesystem::path root(export_dir);
  std::ifstream file(root / "model.pb", std::ios::binary);
  if (!file) fail("onnx_export", export_dir, ": missing model.pb (not an export directory?)");
  graph::proto::ExportedModel model;
  if (!model.ParseFromIstream(&file)) fail("onnx_export", export_dir, ": model.pb is corrupt (cannot parse)");
  if (model.format_version() < 1 || model.format_version() > graph::kExportFormatVersion) {
    fail("onnx_export", export_dir, ": export format version ", model.format_version(), ", this build reads versions 1 to ", graph::kExportFormatVersion);
  }
  std::map<std::string, Tensor> constants;
  for (const auto& [name, tensor] : flow::load((root / "weights.safetensors").string())) constants[name] = tensor;
  write(to_onnx(model, constants), path);
}

}  // namespace flow::onnx
