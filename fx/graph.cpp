#include "fx/graph.h"

#include <glog/logging.h>

#include <algorithm>
#include <set>
#include <sstream>

namespace flow::fx {
namespace {

TensorMeta meta_of_tensor(const Tensor& t) { return {t.shape(), t.dtype(), t.device()}; }

std::string meta_str(const TensorMeta& meta) {
  std::ostringstream out;
  out << meta.shape << " " << dtype_name(meta.dtype) << " " << meta.device.str();
  return out.str();
}

bool same_meta(const TensorMeta& a, const TensorMeta& b) { return a.shape == b.shape && a.dtype == b.dtype && a.device == b.device; }

// A description of meta that keeps the placement and sbp of old when it describes a global
// value's piece (its placement is not its device).
graph::proto::TensorDesc redescribe(const TensorMeta& meta, const graph::proto::TensorDesc* old) {
  graph::proto::TensorDesc desc = graph::describe(meta);
  if (old != nullptr && !old->placement().empty() && old->placement() != old->device()) {
    desc.set_placement(old->placement());
    desc.set_sbp(old->sbp());
  }
  return desc;
}

}  // namespace

const char* opcode_name(Opcode opcode) {
  switch (opcode) {
    case Opcode::kPlaceholder: return "placeholder";
    case Opcode::kGetAttr: return "get_attr";
    case Opcode::kCallFunction: return "call_function";
    case Opcode::kOutput: return "output";
  }
  return "?";
}

// Positions of the nodes, and who reads each node and each value (positions, in order).
struct Graph::Index {
  std::map<std::string, int> positions;
  std::map<std::string, std::vector<int>> node_readers;
  std::map<std::string, std::vector<int>> value_readers;
};

// ---- Node ----

Graph& Node::graph() const {
  if (graph_ == nullptr) fail("fx.node", "an empty Node handle");
  return *graph_;
}

const graph::proto::Node& Node::proto() const { return graph().proto_node(name_, "fx.node"); }

Opcode Node::op() const {
  const std::string& op = proto().op();
  if (op == graph::kInputOp || op == graph::kFeedOp) return Opcode::kPlaceholder;
  if (op == graph::kVariableOp || op == graph::kConstantOp) return Opcode::kGetAttr;
  if (op == graph::kOutputOp) return Opcode::kOutput;
  return Opcode::kCallFunction;
}

std::string Node::target() const {
  const graph::proto::Node& node = proto();
  switch (op()) {
    case Opcode::kCallFunction: return node.op();
    case Opcode::kGetAttr: return node.attrs().at("key").s();
    case Opcode::kOutput: return "output";
    case Opcode::kPlaceholder: return node.op() == graph::kFeedOp ? node.attrs().at("key").s() : node.name();
  }
  return "";
}

std::vector<Value> Node::args() const {
  std::vector<Value> args;
  for (const auto& input : proto().inputs()) {
    auto [producer, index] = graph::parse_value_name(input);
    args.emplace_back(Node(graph_, producer), index);
  }
  return args;
}

Attrs Node::kwargs() const { return op() == Opcode::kCallFunction ? graph::attrs_of(proto()) : Attrs(); }

std::vector<Node> Node::users() const {
  const Graph& g = graph();
  g.proto_node(name_, "fx.node");
  std::vector<Node> users;
  auto found = g.index().node_readers.find(name_);
  if (found == g.index().node_readers.end()) return users;
  for (int position : found->second) users.emplace_back(graph_, g.job_.nodes(position).name());
  return users;
}

int Node::num_outputs() const { return proto().outputs_size(); }

NodeMeta Node::meta() const {
  const graph::proto::Node& node = proto();
  NodeMeta meta;
  for (const auto& desc : node.outputs()) meta.tensor_meta.push_back(graph::meta_of(desc));
  meta.scope = node.scope();
  return meta;
}

Value Node::out(int index) const {
  if (index < 0 || index >= num_outputs()) fail("fx.node", "node ", name_, " has ", num_outputs(), " outputs, no output ", index);
  return Value(*this, index);
}

std::vector<Node> Node::replace_all_uses_with(const Node& replacement) const {
  if (replacement.num_outputs() < num_outputs()) {
    fail("fx.replace_all_uses_with", "node ", name_, " has ", num_outputs(), " outputs but its replacement ", replacement.name(), " has ",
         replacement.num_outputs());
  }
  std::vector<Node> changed;
  for (int i = 0; i < num_outputs(); ++i) {
    for (Node& user : graph().replace_all_uses(Value(*this, i), Value(replacement, i))) {
      if (std::find(changed.begin(), changed.end(), user) == changed.end()) changed.push_back(std::move(user));
    }
  }
  return changed;
}

void Node::replace_input(int index, const Value& value) const {
  graph::proto::Node& node = graph().mutable_proto_node(name_, "fx.replace_input");
  if (index < 0 || index >= node.inputs_size()) fail("fx.replace_input", "node ", name_, " has ", node.inputs_size(), " arguments, no argument ", index);
  value.node().out(value.index());  // exists
  node.set_inputs(index, value.job_name());
  graph().touched();
}

std::string Value::str() const { return node_.num_outputs() > 1 ? node_.name() + "[" + std::to_string(index_) + "]" : node_.name(); }

// ---- InsertingGuard ----

InsertingGuard::InsertingGuard(Graph& graph, InsertPoint point) : graph_(graph), previous_(graph.insert_point()) {
  graph_.set_insert_point(std::move(point));
}
InsertingGuard::~InsertingGuard() { graph_.set_insert_point(previous_); }

// ---- Graph ----

Graph::Graph(graph::proto::Job& job, std::map<std::string, Tensor>& attrs) : job_(job), attrs_(attrs) {}

const Graph::Index& Graph::index() const {
  if (index_) return *index_;
  auto index = std::make_shared<Index>();
  for (int i = 0; i < job_.nodes_size(); ++i) {
    const graph::proto::Node& node = job_.nodes(i);
    index->positions.emplace(node.name(), i);
    for (const auto& input : node.inputs()) {
      std::vector<int>& readers = index->node_readers[graph::parse_value_name(input).first];
      if (readers.empty() || readers.back() != i) readers.push_back(i);
      std::vector<int>& value_readers = index->value_readers[input];
      if (value_readers.empty() || value_readers.back() != i) value_readers.push_back(i);
    }
  }
  index_ = std::move(index);
  return *index_;
}

void Graph::touched() {
  ++version_;
  index_.reset();
}

int Graph::position(const std::string& name) const {
  auto found = index().positions.find(name);
  return found == index().positions.end() ? -1 : found->second;
}

bool Graph::has_node(const std::string& name) const { return position(name) >= 0; }

const graph::proto::Node& Graph::proto_node(const std::string& name, const char* caller) const {
  const int at = position(name);
  if (at < 0) fail(caller, "node ", name, " is not in the graph (erased?)");
  return job_.nodes(at);
}

graph::proto::Node& Graph::mutable_proto_node(const std::string& name, const char* caller) {
  const int at = position(name);
  if (at < 0) fail(caller, "node ", name, " is not in the graph (erased?)");
  return *job_.mutable_nodes(at);
}

std::vector<Node> Graph::nodes() const {
  std::vector<Node> nodes;
  nodes.reserve(static_cast<size_t>(job_.nodes_size()));
  for (const auto& node : job_.nodes()) nodes.emplace_back(const_cast<Graph*>(this), node.name());
  return nodes;
}

Node Graph::node(const std::string& name) const {
  proto_node(name, "fx.node");
  return Node(const_cast<Graph*>(this), name);
}

std::vector<Node> Graph::placeholders() const {
  std::vector<Node> found;
  for (const Node& node : nodes()) {
    if (node.op() == Opcode::kPlaceholder) found.push_back(node);
  }
  return found;
}

std::vector<Node> Graph::outputs() const {
  std::vector<std::pair<int64_t, Node>> indexed;
  for (const auto& node : job_.nodes()) {
    if (node.op() == graph::kOutputOp) indexed.emplace_back(node.attrs().at("index").i(), Node(const_cast<Graph*>(this), node.name()));
  }
  std::sort(indexed.begin(), indexed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Node> found;
  for (auto& [i, node] : indexed) found.push_back(std::move(node));
  return found;
}

std::string Graph::unique_name(const std::string& base) const {
  if (!has_node(base)) return base;
  for (int n = 1;; ++n) {
    std::string candidate = base + "_" + std::to_string(n);
    if (!has_node(candidate)) return candidate;
  }
}

void Graph::set_insert_point(InsertPoint point) { insert_point_ = std::move(point); }

InsertingGuard Graph::inserting_before(const Node& node) {
  proto_node(node.name(), "fx.inserting_before");
  return InsertingGuard(*this, {node.name(), false});
}

InsertingGuard Graph::inserting_after(const Node& node) {
  proto_node(node.name(), "fx.inserting_after");
  return InsertingGuard(*this, {node.name(), true});
}

graph::proto::Node& Graph::place_new_node(const std::string& caller) {
  int target = job_.nodes_size() - 1;
  if (insert_point_.anchor.empty()) {
    for (int i = 0; i < job_.nodes_size() - 1; ++i) {
      if (job_.nodes(i).op() == graph::kOutputOp) {
        target = i;
        break;
      }
    }
  } else {
    int anchor = -1;
    for (int i = 0; i < job_.nodes_size() - 1; ++i) {
      if (job_.nodes(i).name() == insert_point_.anchor) anchor = i;
    }
    if (anchor < 0) {
      job_.mutable_nodes()->RemoveLast();
      fail(caller, "the insert point's node ", insert_point_.anchor, " is not in the graph (erased?)");
    }
    target = insert_point_.after ? anchor + 1 : anchor;
  }
  for (int i = job_.nodes_size() - 1; i > target; --i) job_.mutable_nodes()->SwapElements(i, i - 1);
  // Inserting after a node keeps successive new nodes in creation order.
  if (!insert_point_.anchor.empty() && insert_point_.after) insert_point_.anchor = job_.nodes(target).name();
  touched();
  return *job_.mutable_nodes(target);
}

Node Graph::create_node(const std::string& op, const std::vector<Value>& args, const Attrs& kwargs, const std::string& name) {
  const OpDef* def = nullptr;
  try {
    def = &find_op(op);
  } catch (const Error&) {
    fail("fx.create_node", "no op named '", op, "' is registered");
  }
  // Where the node will go: its arguments must be defined before that.
  int insert_at = -1;
  if (!insert_point_.anchor.empty()) {
    const int anchor = position(insert_point_.anchor);
    if (anchor < 0) fail("fx.create_node", "the insert point's node ", insert_point_.anchor, " is not in the graph (erased?)");
    insert_at = insert_point_.after ? anchor + 1 : anchor;
  }
  std::vector<TensorMeta> metas;
  for (const Value& arg : args) {
    const graph::proto::Node& producer = proto_node(arg.node().name(), "fx.create_node");
    if (arg.index() < 0 || arg.index() >= producer.outputs_size()) {
      fail("fx.create_node", "argument ", arg.node().name(), "[", arg.index(), "] does not exist: the node has ", producer.outputs_size(), " outputs");
    }
    if (producer.op() == graph::kOutputOp) fail("fx.create_node", "an output node (", producer.name(), ") is not a value");
    if (insert_at >= 0 && position(producer.name()) >= insert_at) {
      fail("fx.create_node", "argument ", producer.name(), " is defined after the insert point (", insert_point_.anchor, ")");
    }
    metas.push_back(graph::meta_of(producer.outputs(arg.index())));
  }
  std::vector<TensorMeta> out_metas;
  try {
    out_metas = checked_infer(*def, metas, kwargs);
  } catch (const Error& e) {
    fail("fx.create_node", op, ": ", e.what());
  }
  const std::string scope = insert_point_.anchor.empty() ? "" : proto_node(insert_point_.anchor, "fx.create_node").scope();
  const std::string node_name = unique_name(name.empty() ? (scope.empty() ? op : scope + "." + op) : name);
  graph::proto::Node* node = job_.add_nodes();
  node->set_name(node_name);
  node->set_op(op);
  node->set_scope(scope);
  for (const Value& arg : args) node->add_inputs(arg.job_name());
  graph::set_attrs(*node, kwargs);
  for (const TensorMeta& meta : out_metas) *node->add_outputs() = graph::describe(meta);
  // One process: every value is broadcast (as the tracer records it).
  if (def->sbp) {
    for (size_t i = 0; i < args.size(); ++i) node->add_input_sbp(Sbp::broadcast().str());
  }
  place_new_node("fx.create_node");
  return Node(this, node_name);
}

Node Graph::create_constant(const std::string& name, const Tensor& value) {
  if (!value.defined()) fail("fx.create_constant", "constant ", name, " is an undefined tensor");
  if (value.is_lazy()) fail("fx.create_constant", "constant ", name, " is a lazy tensor; constants hold data");
  const std::string node_name = unique_name(name.empty() ? "_constant" : name);
  graph::proto::Node* node = job_.add_nodes();
  node->set_name(node_name);
  node->set_op(graph::kConstantOp);
  (*node->mutable_attrs())["key"].set_s(node_name);
  *node->add_outputs() = graph::describe(meta_of_tensor(value));
  attrs_[node_name] = value;
  place_new_node("fx.create_constant");
  return Node(this, node_name);
}

const Tensor& Graph::attr_tensor(const Node& node) const {
  if (node.op() != Opcode::kGetAttr) fail("fx.attr_tensor", "node ", node.name(), " is a ", opcode_name(node.op()), " node, not get_attr");
  auto found = attrs_.find(node.name());
  if (found == attrs_.end()) fail("fx.attr_tensor", "no tensor is held for get_attr node ", node.name());
  return found->second;
}

void Graph::erase_node(const Node& node) {
  const graph::proto::Node& proto = proto_node(node.name(), "fx.erase_node");
  if (proto.op() == graph::kOutputOp) fail("fx.erase_node", "node ", node.name(), " is an output of the graph");
  const size_t users = node.users().size();
  if (users > 0) fail("fx.erase_node", "node ", node.name(), " still has ", users, users == 1 ? " user" : " users");
  if (proto.op() == graph::kVariableOp || proto.op() == graph::kConstantOp) attrs_.erase(node.name());
  job_.mutable_nodes()->DeleteSubrange(position(node.name()), 1);
  touched();
}

std::vector<Node> Graph::replace_all_uses(const Value& from, const Value& to) {
  proto_node(from.node().name(), "fx.replace_all_uses_with");
  to.node().out(to.index());
  const std::string old_value = from.job_name();
  const std::string new_value = to.job_name();
  std::vector<Node> changed;
  if (old_value == new_value) return changed;
  auto readers = index().value_readers.find(old_value);
  if (readers == index().value_readers.end()) return changed;
  const std::vector<int> positions = readers->second;
  // The replacement and the nodes it is computed from may read the old value (new = f(old));
  // they keep doing so, or the graph would have a cycle.
  std::set<std::string> sources;
  std::vector<std::string> pending{to.node().name()};
  while (!pending.empty()) {
    const std::string name = pending.back();
    pending.pop_back();
    if (!sources.insert(name).second) continue;
    for (const auto& input : proto_node(name, "fx.replace_all_uses_with").inputs()) pending.push_back(graph::parse_value_name(input).first);
  }
  for (int position : positions) {
    graph::proto::Node& reader = *job_.mutable_nodes(position);
    if (sources.count(reader.name())) continue;
    for (int i = 0; i < reader.inputs_size(); ++i) {
      if (reader.inputs(i) == old_value) reader.set_inputs(i, new_value);
    }
    changed.emplace_back(this, reader.name());
  }
  touched();
  return changed;
}

bool Graph::eliminate_dead_code() {
  std::set<std::string> needed;
  std::set<int> dead;
  for (int i = job_.nodes_size() - 1; i >= 0; --i) {
    const graph::proto::Node& node = job_.nodes(i);
    bool live = node.op() == graph::kInputOp || node.op() == graph::kFeedOp || graph::has_side_effects(node);
    for (int j = 0; j < node.outputs_size() && !live; ++j) live = needed.count(graph::value_name(node.name(), j)) != 0;
    if (!live) {
      dead.insert(i);
      continue;
    }
    for (const auto& input : node.inputs()) needed.insert(input);
  }
  for (auto it = dead.rbegin(); it != dead.rend(); ++it) {
    const graph::proto::Node& node = job_.nodes(*it);
    if (node.op() == graph::kVariableOp || node.op() == graph::kConstantOp) attrs_.erase(node.name());
    job_.mutable_nodes()->DeleteSubrange(*it, 1);
  }
  if (!dead.empty()) touched();
  return !dead.empty();
}

void Graph::lint() const {
  std::map<std::string, const graph::proto::Node*> defined;
  std::set<int64_t> result_indices;
  int64_t num_outputs = 0;
  for (const auto& node : job_.nodes()) {
    const std::string& name = node.name();
    if (name.empty()) fail("fx.lint", "a node has no name");
    if (defined.count(name)) fail("fx.lint", "two nodes are named ", name);
    std::vector<TensorMeta> arg_metas;
    for (const auto& input : node.inputs()) {
      const auto [producer, index] = graph::parse_value_name(input);
      auto found = defined.find(producer);
      if (found == defined.end()) fail("fx.lint", "node ", name, " reads ", input, ", which is not defined before it");
      if (index < 0 || index >= found->second->outputs_size()) {
        fail("fx.lint", "node ", name, " reads ", input, " but ", producer, " has ", found->second->outputs_size(), " outputs");
      }
      if (found->second->op() == graph::kOutputOp) fail("fx.lint", "node ", name, " reads the output node ", producer);
      arg_metas.push_back(graph::meta_of(found->second->outputs(index)));
    }
    const std::string& op = node.op();
    if (op == graph::kInputOp || op == graph::kOutputOp) {
      if (!node.attrs().count("index")) fail("fx.lint", node.op(), " node ", name, " has no index");
    }
    if (op == graph::kOutputOp) {
      if (node.inputs_size() != 1) fail("fx.lint", "output node ", name, " reads ", node.inputs_size(), " values instead of one");
      if (!result_indices.insert(node.attrs().at("index").i()).second) {
        fail("fx.lint", "two output nodes give result ", node.attrs().at("index").i());
      }
      ++num_outputs;
    } else if (op == graph::kVariableOp || op == graph::kConstantOp) {
      auto held = attrs_.find(name);
      if (held == attrs_.end() || !held->second.defined()) fail("fx.lint", "get_attr node ", name, " has no tensor behind it");
      // The device may differ: ShapeProp on meta inputs describes the state as meta stand-ins.
      const TensorMeta described = node.outputs_size() == 1 ? graph::meta_of(node.outputs(0)) : TensorMeta{};
      if (node.outputs_size() != 1 || described.shape != held->second.shape() || described.dtype != held->second.dtype()) {
        fail("fx.lint", "get_attr node ", name, " describes its value unlike its tensor ", meta_str(meta_of_tensor(held->second)));
      }
    } else if (!graph::is_source_kind(op)) {
      const OpDef* def = nullptr;
      try {
        def = &find_op(op);
      } catch (const Error&) {
        fail("fx.lint", "node ", name, " calls '", op, "', which is not a registered op");
      }
      std::vector<TensorMeta> inferred;
      try {
        inferred = checked_infer(*def, arg_metas, graph::attrs_of(node));
      } catch (const Error& e) {
        fail("fx.lint", "node ", name, ": ", e.what());
      }
      if (static_cast<int>(inferred.size()) != node.outputs_size()) {
        fail("fx.lint", "node ", name, " describes ", node.outputs_size(), " outputs but ", op, " gives ", inferred.size());
      }
      for (size_t i = 0; i < inferred.size(); ++i) {
        const TensorMeta stored = graph::meta_of(node.outputs(static_cast<int>(i)));
        if (!same_meta(stored, inferred[i])) {
          fail("fx.lint", "node ", name, " output ", i, " is described as ", meta_str(stored), " but ", op, " infers ", meta_str(inferred[i]),
               " (stale metas after an edit? ShapeProp rewrites them)");
        }
      }
    }
    defined[name] = &node;
  }
  if (num_outputs == 0) fail("fx.lint", "the graph has no output node");
  if (*result_indices.rbegin() != num_outputs - 1) fail("fx.lint", "the output nodes' result indices are not 0..", num_outputs - 1);
}

void Graph::set_tensor_meta(const Node& node, const std::vector<TensorMeta>& metas) {
  graph::proto::Node& proto = mutable_proto_node(node.name(), "fx.set_tensor_meta");
  if (static_cast<int>(metas.size()) != proto.outputs_size()) {
    fail("fx.set_tensor_meta", "node ", node.name(), " has ", proto.outputs_size(), " outputs, got ", metas.size(), " metas");
  }
  for (size_t i = 0; i < metas.size(); ++i) {
    graph::proto::TensorDesc& desc = *proto.mutable_outputs(static_cast<int>(i));
    desc = redescribe(metas[i], &desc);
  }
  ++version_;
}

void Graph::propagate_metas(const std::vector<TensorMeta>& input_metas) {
  std::map<std::string, int> positions;
  for (int n = 0; n < job_.nodes_size(); ++n) {
    graph::proto::Node& node = *job_.mutable_nodes(n);
    positions[node.name()] = n;
    std::vector<TensorMeta> metas;
    std::vector<TensorMeta> arg_metas;
    for (const auto& input : node.inputs()) {
      const auto [producer, index] = graph::parse_value_name(input);
      auto found = positions.find(producer);
      CHECK(found != positions.end()) << "propagate_metas on a graph lint rejects: " << input;
      arg_metas.push_back(graph::meta_of(job_.nodes(found->second).outputs(index)));
    }
    const std::string& op = node.op();
    if (op == graph::kInputOp) {
      const int64_t index = node.attrs().at("index").i();
      if (index >= static_cast<int64_t>(input_metas.size())) {
        fail("fx.propagate_metas", "placeholder ", node.name(), " is input ", index, " but ", input_metas.size(), " inputs were given");
      }
      metas.push_back(input_metas[static_cast<size_t>(index)]);
    } else if (op == graph::kVariableOp || op == graph::kConstantOp) {
      metas.push_back(meta_of_tensor(attrs_.at(node.name())));
    } else if (op == graph::kOutputOp) {
      metas = arg_metas;
    } else if (op != graph::kFeedOp) {
      try {
        metas = checked_infer(find_op(op), arg_metas, graph::attrs_of(node));
      } catch (const Error& e) {
        fail("fx.propagate_metas", "node ", node.name(), ": ", e.what(),
             " (shape attributes hold the traced shapes: trace again for inputs they do not fit)");
      }
    }
    for (size_t i = 0; i < metas.size() && static_cast<int>(i) < node.outputs_size(); ++i) {
      graph::proto::TensorDesc& desc = *node.mutable_outputs(static_cast<int>(i));
      desc = redescribe(metas[i], &desc);
    }
  }
  ++version_;
}

}  // namespace flow::fx
