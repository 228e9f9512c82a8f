// nn::Graph's printing, as OneFlow prints an nn.Graph: config, inputs, modules with their
// parameters, buffers and traced input/output metas, outputs.
#include "graph/compiled_plan.h"
#include "graph/graph.h"

namespace flow::nn {

using graph::meta_str;

void Graph::print_module(std::ostream& out, const std::string& name, const Module& module, int indent) const {
  const std::string pad(static_cast<size_t>(indent), ' ');
  const std::string inner = pad + "  ";
  out << pad << "(MODULE:" << name << ":" << module.name() << "(" << module.extra_repr() << ")): (\n";
  const ModuleCall* call = nullptr;
  if (const CompiledPlan* latest = plans_.latest()) {
    auto found = latest->traced.module_calls.find(&module);
    if (found != latest->traced.module_calls.end()) call = &found->second;
  }
  if (call) out << inner << "(INPUT:_" << name << "_input.0:tensor(..., is_lazy=true, " << meta_str(call->input) << "))\n";
  for (const auto& [key, p] : module.named_parameters(false)) {
    out << inner << "(PARAMETER:" << name << "." << key << ":tensor(..., " << graph::guard_str(graph::guard_of(p))
        << (p.requires_grad() ? ", requires_grad=true" : "") << ")): ()\n";
  }
  for (const auto& [key, b] : module.named_buffers(false)) {
    out << inner << "(BUFFER:" << name << "." << key << ":tensor(..., " << graph::guard_str(graph::guard_of(b)) << ")): ()\n";
  }
  for (const auto& [child_name, child] : module.named_children()) print_module(out, name + "." + child_name, *child, indent + 2);
  if (call && call->has_output) {
    out << inner << "(OUTPUT:_" << name << "_output.0:tensor(..., is_lazy=true, " << meta_str(call->output) << "))\n";
  }
  out << pad << ")\n";
}

void Graph::pretty_print(std::ostream& out) const {
  const std::string graph_name = name_.empty() ? type_name() : name_;
  out << "(GRAPH:" << graph_name << ":" << type_name() << "): (\n";
  out << "  (CONFIG:config:GraphConfig(training=" << (config_.training() ? "true" : "false") << ", cache_limit=" << config_.cache_limit()
      << (config_.amp_enabled() ? std::string(", amp=") + dtype_name(config_.amp_dtype()) : std::string())
      << ", compiled_plans=" << plans_.size() << "))\n";
  const CompiledPlan* latest = plans_.latest();
  if (latest) {
    const graph::InputSignature& inputs = latest->signature;
    for (size_t i = 0; i < inputs.size(); ++i) {
      out << "  (INPUT:_" << graph_name << "_input." << i << ":tensor(..., " << graph::guard_str(inputs[i]) << "))\n";
    }
  }
  for (const auto& [name, module] : modules_) print_module(out, name, *module, 2);
  if (latest) {
    const std::vector<graph::InputGuard>& outputs = latest->traced.output_layouts;
    for (size_t i = 0; i < outputs.size(); ++i) {
      out << "  (OUTPUT:_" << graph_name << "_output." << i << ":tensor(..., " << graph::guard_str(outputs[i]) << "))\n";
    }
  }
  out << ")";
}

std::ostream& operator<<(std::ostream& out, const Graph& graph) {
  graph.pretty_print(out);
  return out;
}

}  // namespace flow::nn
