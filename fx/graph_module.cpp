#include "fx/graph_module.h"

#include <algorithm>
#include <memory>
#include <set>
#include <sstream>

#include "core/grad_mode.h"
#include "core/interpreter.h"
#include "graph/executor.h"
#include "graph/tracer.h"

namespace flow::fx {
namespace {

// A tensor with meta and no data, standing for a trace input (what the tracer reads of it).
Tensor described_tensor(const Shape& shape, DType dtype, Device device) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  impl->device = device;
  return Tensor(std::move(impl));
}

// Gives traced ops the scope of the registered submodule being called ("0.conv").
class ScopeObserver final : public nn::ModuleCallObserver {
 public:
  ScopeObserver(graph::Tracer& tracer, std::map<const nn::Module*, std::string> names)
      : tracer_(tracer), names_(std::move(names)), previous_(nn::set_module_call_observer(this)) {}
  ~ScopeObserver() override { nn::set_module_call_observer(previous_); }
  ScopeObserver(const ScopeObserver&) = delete;
  ScopeObserver& operator=(const ScopeObserver&) = delete;

  void enter(const nn::Module& module, const Tensor&) override {
    auto named = names_.find(&module);
    scopes_.push_back(named != names_.end() ? named->second : (scopes_.empty() ? "" : scopes_.back()));
    tracer_.push_scope(scopes_.back());
  }
  void exit(const nn::Module&, const Tensor&) override {
    tracer_.pop_scope();
    scopes_.pop_back();
  }

 private:
  graph::Tracer& tracer_;
  std::map<const nn::Module*, std::string> names_;
  std::vector<std::string> scopes_;
  nn::ModuleCallObserver* previous_;
};

// torch.fx's names for the graph's ends: "input", "input_1", ... and "output", "output_1", ...
void name_inputs_and_outputs(graph::proto::Job& job) {
  std::set<std::string> taken;
  for (const auto& node : job.nodes()) taken.insert(node.name());
  std::map<std::string, std::string> renamed;
  for (auto& node : *job.mutable_nodes()) {
    const bool input = node.op() == graph::kInputOp;
    if (!input && node.op() != graph::kOutputOp) continue;
    const int64_t index = node.attrs().at("index").i();
    const std::string stem = input ? "input" : "output";
    std::string name = index == 0 ? stem : stem + "_" + std::to_string(index);
    while (taken.count(name)) name += "_";
    taken.insert(name);
    renamed[graph::value_name(node.name(), 0)] = graph::value_name(name, 0);
    node.set_name(name);
  }
  graph::rename_inputs(job, renamed);
}

GraphModule trace(nn::Module* module, const TensorList& inputs, const ForwardFn& forward, const std::string& job_name) {
  std::map<TensorImpl*, std::string> variable_names;
  std::map<const nn::Module*, std::string> module_names;
  Device state_device = kCPU;
  if (module != nullptr) {
    std::vector<std::pair<std::string, std::shared_ptr<nn::Module>>> modules;
    try {
      modules = module->named_modules();
    } catch (const std::bad_weak_ptr&) {
      fail("fx.symbolic_trace", module->name(), " must be held by a std::shared_ptr (its submodules are walked)");
    }
    for (auto& [path, m] : modules) module_names[m.get()] = path;
    for (auto& [key, p] : module->named_parameters()) variable_names[p.impl()] = key;
    for (auto& [key, b] : module->named_buffers()) variable_names[b.impl()] = key;
    const TensorList parameters = module->parameters();
    if (!parameters.empty()) state_device = parameters.front().device();
  }
  std::ostringstream unused_log;
  graph::Tracer tracer(job_name, std::move(variable_names), 0, unused_log);
  {
    const autograd::NoGradGuard no_grad;
    InterpreterGuard guard(&tracer);
    ScopeObserver observer(tracer, std::move(module_names));
    TensorList lazy_inputs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Tensor& example = inputs[i];
      if (!example.defined()) fail("fx.symbolic_trace", "input ", i, " is an undefined tensor");
      const Device device = example.device().is_meta() ? state_device : example.device();
      lazy_inputs.push_back(tracer.add_input(static_cast<int>(i), described_tensor(example.shape(), example.dtype(), device)));
    }
    const TensorList outputs = forward(lazy_inputs);
    if (outputs.empty()) fail("fx.symbolic_trace", "the traced function returned no tensor");
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].defined() && !graph::is_traced(outputs[i])) {
        fail("fx.symbolic_trace", "output ", i, " does not depend on the inputs or state (an eager tensor made outside the trace)");
      }
      tracer.add_output(static_cast<int>(i), outputs[i]);
    }
  }
  tracer.release();
  graph::proto::Job job;
  job.Swap(&tracer.job());
  name_inputs_and_outputs(job);
  return GraphModule(std::move(job), tracer.captured());
}

std::string args_str(const Node& node) {
  const std::vector<Value> args = node.args();
  std::string text = "(";
  for (size_t i = 0; i < args.size(); ++i) text += (i ? ", " : "") + args[i].str();
  return text + (args.size() == 1 ? ",)" : ")");
}

std::string kwargs_str(const Node& node) {
  std::ostringstream out;
  out << "{";
  bool first = true;
  const Attrs kwargs = node.kwargs();
  for (const auto& [name, value] : kwargs.values()) {
    out << (first ? "" : ", ") << name << ": " << value;
    first = false;
  }
  out << "}";
  return out.str();
}

}  // namespace

struct GraphModule::State {
  State(graph::proto::Job j, std::map<std::string, Tensor> a) : job(std::move(j)), attrs(std::move(a)) {}
  graph::proto::Job job;
  std::map<std::string, Tensor> attrs;
  Graph graph{job, attrs};
  // The executor refers to the Job and plan: dropped before either changes.
  std::unique_ptr<graph::Plan> plan;
  std::unique_ptr<graph::Executor> executor;
  int64_t compiled_version = -1;
};

GraphModule::GraphModule(graph::proto::Job job, std::map<std::string, Tensor> attrs)
    : state_(std::make_unique<State>(std::move(job), std::move(attrs))) {}
GraphModule::~GraphModule() = default;
GraphModule::GraphModule(GraphModule&&) noexcept = default;
GraphModule& GraphModule::operator=(GraphModule&&) noexcept = default;

Graph& GraphModule::graph() { return state_->graph; }
const Graph& GraphModule::graph() const { return state_->graph; }
const graph::proto::Job& GraphModule::job() const { return state_->job; }
const std::map<std::string, Tensor>& GraphModule::attrs() const { return state_->attrs; }

void GraphModule::print_tabular(std::ostream& out) const {
  const std::vector<std::string> header{"opcode", "name", "target", "args", "kwargs"};
  std::vector<std::vector<std::string>> rows;
  for (const Node& node : graph().nodes()) rows.push_back({opcode_name(node.op()), node.name(), node.target(), args_str(node), kwargs_str(node)});
  std::vector<size_t> widths;
  for (const auto& title : header) widths.push_back(title.size());
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  auto print_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(widths[c] - row[c].size() + 2, ' ');
    }
    out << line << "\n";
  };
  print_row(header);
  std::vector<std::string> rule;
  for (size_t width : widths) rule.emplace_back(width, '-');
  print_row(rule);
  for (const auto& row : rows) print_row(row);
}

void GraphModule::recompile() {
  State& state = *state_;
  state.executor.reset();
  state.plan.reset();
  state.graph.lint();
  state.plan = std::make_unique<graph::Plan>(graph::make_plan(state.job));
  state.executor = std::make_unique<graph::Executor>(state.job, *state.plan, state.attrs);
  state.compiled_version = state.graph.version();
}

TensorList GraphModule::operator()(const TensorList& inputs) {
  State& state = *state_;
  bool same_metas = true;
  for (const auto& node : state.job.nodes()) {
    if (node.op() != graph::kInputOp) continue;
    const int64_t index = node.attrs().at("index").i();
    if (index >= static_cast<int64_t>(inputs.size())) {
      fail("fx.GraphModule", "placeholder ", node.name(), " is input ", index, " but ", inputs.size(), " inputs were given");
    }
    const Tensor& input = inputs[static_cast<size_t>(index)];
    if (!input.defined()) fail("fx.GraphModule", "input ", index, " is an undefined tensor");
    const TensorMeta meta = graph::meta_of(node.outputs(0));
    same_metas = same_metas && meta.shape == input.shape() && meta.dtype == input.dtype() && meta.device == input.device();
  }
  if (!same_metas) {
    std::vector<TensorMeta> metas;
    for (const Tensor& input : inputs) metas.push_back({input.shape(), input.dtype(), input.device()});
    state.executor.reset();
    state.graph.propagate_metas(metas);
  }
  if (!state.executor || state.compiled_version != state.graph.version()) recompile();
  const autograd::NoGradGuard no_grad;
  std::vector<TensorList> results = state.executor->run(1, [&](int64_t, TensorList& piece_inputs, std::map<std::string, Tensor>&) {
    piece_inputs = inputs;
  });
  return std::move(results.at(0));
}

const graph::Plan& GraphModule::plan() const {
  if (!state_->plan) fail("fx.GraphModule", "no plan compiled yet: call the module or recompile() first");
  return *state_->plan;
}

GraphModule symbolic_trace(nn::Module& module, const TensorList& inputs) {
  if (inputs.size() != 1) {
    fail("fx.symbolic_trace", module.name(), ".forward takes one tensor, got ", inputs.size(),
         " inputs (pass a forward function for a multi-input call)");
  }
  return trace(&module, inputs, [&module](const TensorList& lazy) { return TensorList{module(lazy[0])}; }, module.name());
}

GraphModule symbolic_trace(nn::Module& module, const TensorList& inputs, const ForwardFn& forward) {
  return trace(&module, inputs, forward, module.name());
}

GraphModule symbolic_trace(const ForwardFn& function, const TensorList& inputs) { return trace(nullptr, inputs, function, "function"); }

graph::PassFn graph_pass(std::function<void(Graph&)> pass) {
  return [pass = std::move(pass)](graph::proto::Job& job, graph::PassContext& context) {
    Graph view(job, context.fixed);
    pass(view);
  };
}

}  // namespace flow::fx
