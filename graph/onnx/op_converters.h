#pragma once
// Internal to flow_onnx: the ONNX graph under construction, and the mapping of one Job node to
// ONNX nodes.
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/onnx/onnx.pb.h"
#include "job/job.h"

namespace flow::onnx {

// ONNX element type (TensorProto::DataType) of a flow dtype.
int32_t onnx_type(DType dtype);

::onnx::AttributeProto int_attr(const std::string& name, int64_t value);
::onnx::AttributeProto ints_attr(const std::string& name, const std::vector<int64_t>& values);
::onnx::AttributeProto float_attr(const std::string& name, double value);

// Appends nodes and initializers to an ONNX graph under unique names. Node and value names
// derive from the scope: the Job node being converted.
class GraphBuilder {
 public:
  explicit GraphBuilder(::onnx::GraphProto& graph) : graph_(graph) {}
  // Takes `name` for a graph input or output, so no generated name uses it. False when taken.
  bool reserve(const std::string& name) { return names_.insert(name).second; }
  void set_scope(const std::string& scope) { scope_ = scope; }

  // Adds a node with `outputs` outputs; returns their names.
  std::vector<std::string> add_node(const std::string& op_type, const std::vector<std::string>& inputs,
                                    const std::vector<::onnx::AttributeProto>& attributes = {}, int outputs = 1);
  // Adds a node with one output; returns its name.
  std::string add(const std::string& op_type, const std::vector<std::string>& inputs,
                  const std::vector<::onnx::AttributeProto>& attributes = {});
  // Adds a node writing the given (reserved) value name.
  void add_named(const std::string& op_type, const std::vector<std::string>& inputs, const std::string& output);

  // Initializers; each returns the value name.
  std::string add_initializer(const std::string& hint, const Tensor& tensor);
  std::string add_ints(const std::string& hint, const std::vector<int64_t>& values);  // 1-d int64
  std::string add_scalar(double value, DType dtype);                                   // 0-d

 private:
  std::string unique(const std::string& hint);
  ::onnx::GraphProto& graph_;
  std::set<std::string> names_;
  std::string scope_;
};

// A Job node with its inputs resolved to ONNX values.
struct JobNode {
  const graph::proto::Node& node;
  Attrs attrs;
  std::vector<std::string> inputs;  // ONNX value names
  std::vector<TensorMeta> input_metas;
  std::vector<TensorMeta> output_metas;
  // With a dynamic batch: for each integer-list attribute, the elements that hold the batch size.
  std::map<std::string, std::set<int>> batch_slots;
};

using NodeConverter = std::function<std::vector<std::string>(GraphBuilder&, const JobNode&)>;

[[noreturn]] void unsupported(const JobNode& job_node, const std::string& why);
const std::vector<int64_t>& ints(const JobNode& n, const char* name);
// The node's "dim" attribute as a non-negative axis of its first input.
int64_t axis_of(const JobNode& n);

// Converters for the indexing, sorting, cumulative and reduction ops, by op name
// (index_converters.cpp).
const std::map<std::string, NodeConverter>& indexing_and_reduction_converters();

// Emits the ONNX nodes that compute the node's outputs; returns one ONNX value name per Job
// output, or "" for an output ONNX does not compute (max_pool2d's indices), which no Job node may
// read. Throws flow::Error for an op without an ONNX mapping.
std::vector<std::string> convert_node(GraphBuilder& builder, const JobNode& node);

}  // namespace flow::onnx
