#include "fx/interpreter.h"

#include <glog/logging.h>

#include <sstream>

#include "core/grad_mode.h"
#include "core/interpreter.h"
#include "graph/tracer.h"

namespace flow::fx {

// ---- Interpreter ----

Interpreter::Interpreter(GraphModule& module) : module_(module) {}
Interpreter::~Interpreter() = default;

TensorList Interpreter::run(const TensorList& inputs) {
  const Graph& graph = module_.graph();
  graph.lint();
  const std::vector<Node> nodes = graph.nodes();
  // Each value is dropped after the last node reading it.
  std::map<std::string, size_t> last_use;
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const Value& arg : nodes[i].args()) last_use[arg.node().name()] = i;
  }
  const autograd::NoGradGuard no_grad;
  inputs_ = &inputs;
  env_.clear();
  TensorList results(graph.outputs().size());
  try {
    for (size_t i = 0; i < nodes.size(); ++i) {
      const Node& node = nodes[i];
      TensorList values = run_node(node);
      if (node.op() == Opcode::kOutput) {
        results.at(static_cast<size_t>(node.proto().attrs().at("index").i())) = values.at(0);
      } else {
        if (static_cast<int>(values.size()) != node.num_outputs()) {
          fail("fx.Interpreter", "node ", node.name(), " gave ", values.size(), " values for its ", node.num_outputs(), " outputs");
        }
        env_[node.name()] = std::move(values);
      }
      for (const Value& arg : node.args()) {
        if (last_use[arg.node().name()] == i) env_.erase(arg.node().name());
      }
    }
  } catch (...) {
    inputs_ = nullptr;
    env_.clear();
    throw;
  }
  inputs_ = nullptr;
  env_.clear();
  return results;
}

TensorList Interpreter::run_node(const Node& node) {
  TensorList args;
  for (const Value& arg : node.args()) {
    auto found = env_.find(arg.node().name());
    CHECK(found != env_.end()) << "lint passed but " << arg.node().name() << " has no value";
    args.push_back(found->second.at(static_cast<size_t>(arg.index())));
  }
  switch (node.op()) {
    case Opcode::kPlaceholder: {
      const graph::proto::Node& proto = node.proto();
      if (proto.op() != graph::kInputOp) fail("fx.Interpreter", "placeholder ", node.name(), " is a per-run feed (", node.target(), "), which the interpreter cannot supply");
      const int64_t index = proto.attrs().at("index").i();
      if (index >= static_cast<int64_t>(inputs_->size())) {
        fail("fx.Interpreter", "placeholder ", node.name(), " is input ", index, " but ", inputs_->size(), " inputs were given");
      }
      return placeholder(node, (*inputs_)[static_cast<size_t>(index)]);
    }
    case Opcode::kGetAttr: return get_attr(node);
    case Opcode::kCallFunction: return call_function(node, args, node.kwargs());
    case Opcode::kOutput: return output(node, args);
  }
  return {};
}

TensorList Interpreter::placeholder(const Node&, const Tensor& input) { return {input}; }

TensorList Interpreter::get_attr(const Node& node) { return {module_.graph().attr_tensor(node)}; }

TensorList Interpreter::call_function(const Node& node, const TensorList& args, const Attrs& kwargs) {
  return apply(find_op(node.target()), args, kwargs);
}

TensorList Interpreter::output(const Node&, const TensorList& args) { return args; }

// ---- Transformer ----

Transformer::Transformer(GraphModule& module) : Interpreter(module) {}
Transformer::~Transformer() = default;

TensorList Transformer::run_node(const Node& node) {
  // New nodes keep the module scope of the node they come from.
  tracer_->push_scope(node.meta().scope);
  struct PopScope {
    graph::Tracer& tracer;
    ~PopScope() { tracer.pop_scope(); }
  } pop{*tracer_};
  return Interpreter::run_node(node);
}

GraphModule Transformer::transform() {
  module().graph().lint();
  // Parameters and buffers stay variables of the same names; constants are captured again as
  // variables of their names and turned back into constants below.
  std::map<TensorImpl*, std::string> state_names;
  std::map<std::string, bool> is_constant;
  for (const auto& node : module().job().nodes()) {
    if (node.op() != graph::kVariableOp && node.op() != graph::kConstantOp) continue;
    state_names[module().attrs().at(node.name()).impl()] = node.name();
    is_constant[node.name()] = node.op() == graph::kConstantOp;
  }
  std::ostringstream unused_log;
  graph::Tracer tracer(module().job().name(), std::move(state_names), 0, unused_log);
  tracer_ = &tracer;
  struct Reset {
    graph::Tracer*& tracer;
    ~Reset() { tracer = nullptr; }
  } reset{tracer_};
  {
    InterpreterGuard guard(&tracer);
    TensorList lazy_inputs;
    int64_t num_inputs = 0;
    for (const Node& node : module().graph().placeholders()) {
      if (node.proto().op() == graph::kInputOp) num_inputs = std::max(num_inputs, node.proto().attrs().at("index").i() + 1);
    }
    lazy_inputs.resize(static_cast<size_t>(num_inputs));
    for (const Node& node : module().graph().placeholders()) {
      const graph::proto::Node& proto = node.proto();
      if (proto.op() != graph::kInputOp) continue;
      const int64_t index = proto.attrs().at("index").i();
      const TensorMeta meta = graph::meta_of(proto.outputs(0));
      auto impl = std::make_shared<TensorImpl>();
      impl->shape = meta.shape;
      impl->strides = contiguous_strides(meta.shape);
      impl->dtype = meta.dtype;
      impl->device = meta.device;
      lazy_inputs[static_cast<size_t>(index)] = tracer.add_input(static_cast<int>(index), Tensor(std::move(impl)));
    }
    const TensorList results = run(lazy_inputs);
    for (size_t i = 0; i < results.size(); ++i) tracer.add_output(static_cast<int>(i), results[i]);
  }
  tracer.release();
  graph::proto::Job job;
  job.Swap(&tracer.job());
  // The new Job's ends keep the old ones' names.
  std::map<std::string, std::string> renamed;
  std::map<int64_t, std::string> input_names, output_names;
  for (const auto& node : module().job().nodes()) {
    if (node.op() == graph::kInputOp) input_names[node.attrs().at("index").i()] = node.name();
    if (node.op() == graph::kOutputOp) output_names[node.attrs().at("index").i()] = node.name();
  }
  for (auto& node : *job.mutable_nodes()) {
    if (node.op() == graph::kVariableOp && is_constant[node.name()]) node.set_op(graph::kConstantOp);
    const bool input = node.op() == graph::kInputOp;
    if (!input && node.op() != graph::kOutputOp) continue;
    const std::string& name = (input ? input_names : output_names)[node.attrs().at("index").i()];
    renamed[graph::value_name(node.name(), 0)] = graph::value_name(name, 0);
    node.set_name(name);
  }
  graph::rename_inputs(job, renamed);
  return GraphModule(std::move(job), tracer.captured());
}

// ---- ShapeProp ----

ShapeProp::ShapeProp(GraphModule& module) : Interpreter(module) {}

TensorList ShapeProp::propagate(const TensorList& inputs) {
  on_meta_ = false;
  for (const Tensor& input : inputs) on_meta_ = on_meta_ || (input.defined() && input.device().is_meta());
  return run(inputs);
}

TensorList ShapeProp::get_attr(const Node& node) {
  TensorList values = Interpreter::get_attr(node);
  // On meta inputs the state stands in as meta tensors of its metas: nothing is read.
  if (on_meta_ && !values[0].device().is_meta()) values[0] = values[0].to(kMeta);
  return values;
}

TensorList ShapeProp::run_node(const Node& node) {
  TensorList values = Interpreter::run_node(node);
  std::vector<TensorMeta> metas;
  for (const Tensor& value : values) metas.push_back({value.shape(), value.dtype(), value.device()});
  module().graph().set_tensor_meta(node, metas);
  return values;
}

}  // namespace flow::fx
