#pragma once
// flow::fx: torch.fx's user-visible IR over flow's own Job. There is no second IR: an fx::Graph
// is a view of a graph::proto::Job (and of the tensors behind its variable and constant nodes),
// every Node is a handle naming one Job node, and every edit writes the Job. What a user builds
// or rewrites here is what the plan compiler and the actor runtime execute.
//
// Node kinds follow torch.fx: placeholder (Job input), get_attr (variable or constant: a
// parameter, buffer or captured tensor), call_function (a registered op), output (one per result
// index of the Job; torch.fx has one output node returning a tuple).
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/op.h"
#include "job/job.h"

namespace flow::fx {

class Graph;

enum class Opcode : uint8_t { kPlaceholder, kGetAttr, kCallFunction, kOutput };
// torch.fx's spelling: "placeholder", "get_attr", "call_function", "output".
const char* opcode_name(Opcode opcode);

// What is known of a node beyond its inputs: the metas of its outputs (the Job's output
// descriptions, rewritten by ShapeProp) and the module scope it was traced in ("0.conv").
struct NodeMeta {
  std::vector<TensorMeta> tensor_meta;
  std::string scope;
};

class Value;

// A handle to one node of a Graph, by name. It stays valid across edits of other nodes; using a
// handle of an erased node is a flow::Error.
class Node {
 public:
  Node() = default;
  Node(Graph* graph, std::string name) : graph_(graph), name_(std::move(name)) {}

  const std::string& name() const { return name_; }
  Opcode op() const;
  // call_function: the op name; get_attr: the state or constant name; placeholder: the node's
  // name; output: "output".
  std::string target() const;
  // The values the node reads, in order.
  std::vector<Value> args() const;
  // The op's attributes (the Job node's attrs); for placeholders and outputs the result index.
  Attrs kwargs() const;
  // Nodes reading any output of this node, in graph order, each once.
  std::vector<Node> users() const;
  int num_outputs() const;
  NodeMeta meta() const;
  // Output i of this node.
  Value out(int index = 0) const;

  // Every reader of output i of this node reads output i of replacement instead (except the
  // nodes the replacement is computed from, so `new = f(old)` needs no fix-up); returns the
  // readers changed. The node keeps existing (erase it, or let eliminate_dead_code do it).
  std::vector<Node> replace_all_uses_with(const Node& replacement) const;
  // Argument i reads value instead.
  void replace_input(int index, const Value& value) const;

  Graph& graph() const;
  const graph::proto::Node& proto() const;
  bool operator==(const Node& other) const { return graph_ == other.graph_ && name_ == other.name_; }
  bool operator<(const Node& other) const { return name_ < other.name_; }

 private:
  Graph* graph_ = nullptr;
  std::string name_;
};

// Output `index` of a node: what an argument refers to (the Job's "<node>:<index>").
class Value {
 public:
  Value(Node node, int index = 0) : node_(std::move(node)), index_(index) {}  // NOLINT: a node is its output 0
  const Node& node() const { return node_; }
  int index() const { return index_; }
  std::string job_name() const { return graph::value_name(node_.name(), index_); }
  // "relu" for a single-output node's value, "max_pool2d[1]" otherwise.
  std::string str() const;
  bool operator==(const Value& other) const { return node_ == other.node_ && index_ == other.index_; }

 private:
  Node node_;
  int index_;
};

// Where create_node puts new nodes: before or after an anchor node, or (no anchor) before the
// first output node.
struct InsertPoint {
  std::string anchor;
  bool after = false;
};

// Restores the graph's previous insert point when it goes out of scope (torch.fx's
// `with graph.inserting_after(node):`).
class InsertingGuard {
 public:
  InsertingGuard(Graph& graph, InsertPoint point);
  ~InsertingGuard();
  InsertingGuard(const InsertingGuard&) = delete;
  InsertingGuard& operator=(const InsertingGuard&) = delete;

 private:
  Graph& graph_;
  InsertPoint previous_;
};

class Graph {
 public:
  // A view of job; attrs holds the tensors behind its variable and constant nodes, by node name.
  // Both must outlive the view.
  Graph(graph::proto::Job& job, std::map<std::string, Tensor>& attrs);
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Every node in execution order.
  std::vector<Node> nodes() const;
  Node node(const std::string& name) const;
  bool has_node(const std::string& name) const;
  std::vector<Node> placeholders() const;
  std::vector<Node> outputs() const;  // by result index

  // A call_function node for the registered op `op` on args, with the op's checked meta
  // inference filling its output metas (an argument error names create_node and the op). The
  // name defaults to the op's, made unique like the tracer's ("mul_2"); the scope is the insert
  // point anchor's.
  Node create_node(const std::string& op, const std::vector<Value>& args, const Attrs& kwargs = {}, const std::string& name = "");
  // A get_attr node for a new constant tensor (e.g. a fused weight), at the insert point.
  Node create_constant(const std::string& name, const Tensor& value);
  // The tensor behind a get_attr node.
  const Tensor& attr_tensor(const Node& node) const;

  InsertingGuard inserting_before(const Node& node);
  InsertingGuard inserting_after(const Node& node);
  const InsertPoint& insert_point() const { return insert_point_; }
  void set_insert_point(InsertPoint point);

  // Removes a node nothing reads; a node with users or an output node is a flow::Error.
  void erase_node(const Node& node);
  // Every reader of value `from` reads `to` instead, except the nodes `to` is computed from
  // (torch.fx leaves that to a delete_user_cb); returns the readers changed.
  std::vector<Node> replace_all_uses(const Value& from, const Value& to);
  // Removes call_function and get_attr nodes whose values nothing needs (in-place writes and
  // collectives stay); returns whether anything was removed.
  bool eliminate_dead_code();
  // Checks the graph's invariants and throws flow::Error("[fx.lint] ...") naming the first broken
  // one: unique names, every argument defined earlier, every output index once, a tensor behind
  // every get_attr, and every op's schema (arity, attrs) and stored metas against the op's
  // checked meta inference.
  void lint() const;

  // Writes the output metas of a node (ShapeProp).
  void set_tensor_meta(const Node& node, const std::vector<TensorMeta>& metas);
  // Re-infers every node's output metas from the inputs' metas (sources keep theirs; variables
  // and constants take their tensors'), as the runtime needs for a new input shape.
  void propagate_metas(const std::vector<TensorMeta>& input_metas);

  const graph::proto::Job& job() const { return job_; }
  const std::map<std::string, Tensor>& attrs() const { return attrs_; }
  // Bumped by every edit, so a GraphModule knows its compiled plan is stale.
  int64_t version() const { return version_; }

 private:
  friend class Node;
  struct Index;

  const Index& index() const;
  int position(const std::string& name) const;
  const graph::proto::Node& proto_node(const std::string& name, const char* caller) const;
  graph::proto::Node& mutable_proto_node(const std::string& name, const char* caller);
  std::string unique_name(const std::string& base) const;
  // Moves a node just added at the end of the Job to the insert point.
  graph::proto::Node& place_new_node(const std::string& caller);
  void touched();

  graph::proto::Job& job_;
  std::map<std::string, Tensor>& attrs_;
  InsertPoint insert_point_;
  int64_t version_ = 0;
  mutable std::shared_ptr<const Index> index_;
};

}  // namespace flow::fx
