#include "graph/graph.h"

#include <cxxabi.h>

#include <atomic>
#include <cstdlib>
#include <sstream>

#include "core/functional.h"
#include "graph/executor.h"
#include "graph/passes.h"
#include "graph/tracer.h"

namespace flow::nn {
namespace {

std::atomic<int> g_graph_count{0};

std::string meta_str(const TensorMeta& meta) {
  std::ostringstream out;
  out << "size=(";
  for (int64_t d = 0; d < meta.shape.ndim(); ++d) out << (d ? ", " : "") << meta.shape[d];
  out << (meta.shape.ndim() == 1 ? ",)" : ")") << ", dtype=flow." << dtype_name(meta.dtype) << ", device=" << meta.device;
  return out.str();
}

TensorMeta meta_of_tensor(const Tensor& t) { return {t.shape(), t.dtype(), t.device()}; }

std::string optimizer_prefix(size_t index) { return "_optimizer." + std::to_string(index) + "."; }

}  // namespace

// What tracing saw of one module call: its input and output metas.
struct Graph::ModuleCall {
  TensorMeta input;
  TensorMeta output;
  bool has_output = false;
};

// Gives traced ops the scope of the module being called and records module inputs/outputs.
class Graph::Observer final : public ModuleCallObserver {
 public:
  Observer(Graph& graph, graph::Tracer& tracer, std::map<const Module*, std::string> names)
      : graph_(graph), tracer_(tracer), names_(std::move(names)), previous_(set_module_call_observer(this)) {}
  ~Observer() override { set_module_call_observer(previous_); }

  void enter(const Module& module, const Tensor& input) override {
    auto named = names_.find(&module);
    const std::string scope = named != names_.end() ? named->second : "";
    tracer_.push_scope(scope);
    if (graph_.debug_level_ >= 1 && named != names_.end()) {
      *graph_.log_ << "(GRAPH:" << graph_.name_ << ") building module " << scope << " (" << module.name() << ")\n";
    }
    auto& call = graph_.module_calls_[&module];
    if (!call) {
      call = std::make_unique<ModuleCall>();
      call->input = meta_of_tensor(input);
    }
  }
  void exit(const Module& module, const Tensor& output) override {
    tracer_.pop_scope();
    auto& call = graph_.module_calls_[&module];
    if (call && output.defined() && !call->has_output) {
      call->output = meta_of_tensor(output);
      call->has_output = true;
    }
  }

 private:
  Graph& graph_;
  graph::Tracer& tracer_;
  std::map<const Module*, std::string> names_;
  ModuleCallObserver* previous_;
};

Graph::Graph() = default;
Graph::~Graph() = default;

std::string Graph::type_name() const {
  int status = 0;
  char* demangled = abi::__cxa_demangle(typeid(*this).name(), nullptr, nullptr, &status);
  std::string name = status == 0 && demangled ? demangled : typeid(*this).name();
  std::free(demangled);
  const size_t colon = name.rfind("::");
  return colon == std::string::npos ? name : name.substr(colon + 2);
}

void Graph::add_module(const std::string& name, std::shared_ptr<Module> module) {
  if (is_compiled()) fail("graph", "register_module('", name, "') after the graph was compiled");
  if (!module) fail("graph", "register_module('", name, "') got a null module");
  if (name.empty() || name.find('.') != std::string::npos) fail("graph", "invalid module name '", name, "'");
  for (const auto& [existing, m] : modules_) {
    if (existing == name) fail("graph", "a module named '", name, "' is already registered");
  }
  modules_.emplace_back(name, std::move(module));
}

void Graph::add_optimizer(std::shared_ptr<optim::Optimizer> optimizer, std::shared_ptr<optim::LRScheduler> scheduler) {
  if (is_compiled()) fail("graph", "add_optimizer after the graph was compiled");
  if (!optimizer) fail("graph", "add_optimizer got a null optimizer");
  optimizers_.push_back(std::move(optimizer));
  schedulers_.push_back(std::move(scheduler));
  config_.training = true;
}

void Graph::train(bool on) {
  if (is_compiled()) fail("graph", name(), ": train()/eval() must be chosen before the first call compiles the graph");
  for (auto& [name, module] : modules_) module->train(on);
}

void Graph::debug(int v_level, std::ostream& log) {
  if (v_level < 0 || v_level > 3) fail("graph", "debug level must be 0..3, got ", v_level);
  debug_level_ = v_level;
  log_ = &log;
}

const graph::proto::Job& Graph::job() const {
  if (!is_compiled()) fail("graph", name(), " has no Job yet: call the graph once to trace and compile it");
  return job_;
}

const graph::Plan& Graph::plan() const {
  if (!is_compiled()) fail("graph", name(), " has no plan yet: call the graph once to trace and compile it");
  return *plan_;
}

std::vector<TensorMeta> Graph::trace(const std::vector<TensorMeta>& input_metas, bool with_optimizers, int debug_level,
                                     graph::proto::Job& job, std::map<std::string, Tensor>& fixed) {
  std::map<TensorImpl*, std::string> variable_names;
  std::map<const Module*, std::string> module_names;
  TensorList module_params;
  for (auto& [prefix, module] : modules_) {
    for (auto& [path, m] : module->named_modules(prefix)) module_names[m.get()] = path;
    for (auto& [key, p] : module->named_parameters()) {
      variable_names[p.impl()] = prefix + "." + key;
      module_params.push_back(p);
    }
    for (auto& [key, b] : module->named_buffers()) variable_names[b.impl()] = prefix + "." + key;
  }
  if (with_optimizers) {
    for (size_t i = 0; i < optimizers_.size(); ++i) {
      for (auto& group : optimizers_[i]->param_groups()) optimizers_[i]->init_state(group.params);
      for (const auto& [key, t] : optimizers_[i]->state_dict()) variable_names[t.impl()] = optimizer_prefix(i) + key;
    }
  }
  // Gradients made while tracing are lazy: keep the eager ones aside and put them back after.
  TensorList eager_grads;
  for (auto& p : module_params) {
    eager_grads.push_back(p.grad());
    p.set_grad(Tensor());
  }
  struct RestoreGrads {
    TensorList& params;
    TensorList& grads;
    ~RestoreGrads() {
      for (size_t i = 0; i < params.size(); ++i) params[i].set_grad(grads[i]);
    }
  } restore{module_params, eager_grads};

  graph::Tracer tracer(name_, variable_names, debug_level, *log_);
  std::vector<TensorMeta> output_metas;
  {
    InterpreterGuard guard(&tracer);
    Observer observer(*this, tracer, module_names);
    TensorList lazy_inputs;
    for (size_t i = 0; i < input_metas.size(); ++i) {
      const TensorMeta& meta = input_metas[i];
      lazy_inputs.push_back(tracer.add_input(static_cast<int>(i), make_tensor(meta.shape, meta.dtype, meta.device)));
    }
    if (debug_level >= 1) *log_ << "(GRAPH:" << name_ << ") building graph\n";
    const TensorList outputs = build(lazy_inputs);
    if (with_optimizers) {
      trained_params_.assign(optimizers_.size(), {});
      for (size_t i = 0; i < optimizers_.size(); ++i) {
        for (auto& group : optimizers_[i]->param_groups()) {
          for (auto& p : group.params) {
            if (p.grad().defined() && p.grad().is_lazy()) trained_params_[i].push_back(p);
          }
        }
        const TensorList& params = trained_params_[i];
        optimizers_[i]->trace_step(params, [&](size_t k, const std::string& scalar) {
          return tracer.add_feed(optimizer_prefix(i) + "param." + std::to_string(k) + "." + scalar, params[k].dtype(), params[k].device());
        });
      }
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      tracer.add_output(static_cast<int>(i), outputs[i]);
      output_metas.push_back(meta_of_tensor(outputs[i]));
    }
  }
  tracer.release();
  job.Clear();
  job.Swap(&tracer.job());
  fixed = tracer.captured();
  return output_metas;
}

void Graph::compile(const TensorList& inputs) {
  const auto start = std::chrono::steady_clock::now();
  if (name_.empty()) name_ = type_name() + "_" + std::to_string(g_graph_count++);
  std::vector<TensorMeta> input_metas;
  for (const auto& t : inputs) input_metas.push_back(meta_of_tensor(t));
  output_metas_ = trace(input_metas, true, debug_level_, job_, fixed_);
  job_.set_training(config_.training);
  graph::PassContext context{fixed_};
  graph::default_passes().run(job_, context, debug_level_, log_);
  plan_ = std::make_unique<graph::Plan>(graph::make_plan(job_));
  if (debug_level_ >= 1) *log_ << "(GRAPH:" << name_ << ") plan: " << plan_->summary() << "\n";
  executor_ = std::make_unique<graph::Executor>(job_, *plan_, fixed_);
  input_metas_ = std::move(input_metas);
  compile_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (debug_level_ >= 1) *log_ << "(GRAPH:" << name_ << ") compiled in " << compile_seconds_ << " s\n";
}

graph::proto::Job Graph::trace_inference(const std::vector<TensorMeta>& input_metas, std::map<std::string, Tensor>& fixed) {
  if (!is_compiled()) fail("export", name(), " has not run yet: call the graph once so that its inputs are known");
  // Eval mode while tracing, then every module back to its own mode (parents first, since
  // train() also sets the children).
  std::vector<std::pair<Module*, bool>> modes;
  for (auto& [prefix, module] : modules_) {
    for (auto& [path, m] : module->named_modules(prefix)) modes.emplace_back(m.get(), m->is_training());
  }
  struct RestoreModes {
    std::vector<std::pair<Module*, bool>>& modes;
    ~RestoreModes() {
      for (auto& [module, training] : modes) module->train(training);
    }
  } restore{modes};
  for (auto& [prefix, module] : modules_) module->eval();
  graph::proto::Job job;
  trace(input_metas, false, 0, job, fixed);
  job.set_training(false);
  return job;
}

void Graph::check_inputs(const TensorList& inputs) const {
  if (inputs.size() != input_metas_.size()) {
    fail("graph", name(), " was traced with ", input_metas_.size(), " inputs, got ", inputs.size());
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) fail("graph", name(), ": input ", i, " is an undefined tensor");
    const TensorMeta meta = meta_of_tensor(inputs[i]);
    const TensorMeta& traced = input_metas_[i];
    if (!(meta.shape == traced.shape) || meta.dtype != traced.dtype || meta.device != traced.device) {
      fail("graph", name(), ": input ", i, " has ", meta_str(meta), " but the graph was traced with ", meta_str(traced),
           " (a compiled graph takes inputs of the traced shapes, dtypes and devices)");
    }
  }
}

std::map<std::string, Tensor> Graph::next_feeds() {
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < optimizers_.size(); ++i) {
    const TensorList& params = trained_params_[i];
    const auto values = optimizers_[i]->next_step_scalars(params);
    for (size_t k = 0; k < params.size(); ++k) {
      for (const auto& [scalar, value] : values[k]) {
        feeds[optimizer_prefix(i) + "param." + std::to_string(k) + "." + scalar] =
            scalar_tensor(value, TensorOptions(params[k].dtype()).device(params[k].device()));
      }
    }
    if (schedulers_[i]) schedulers_[i]->step();
  }
  return feeds;
}

std::vector<TensorList> Graph::execute(int64_t steps, const std::function<TensorList(int64_t)>& next_inputs) {
  const graph::PieceSource source = [&](int64_t piece, TensorList& inputs, std::map<std::string, Tensor>& feeds) {
    inputs = next_inputs(piece);
    check_inputs(inputs);
    for (auto& t : inputs) t = t.contiguous();
    feeds = next_feeds();
  };
  std::vector<TensorList> outputs = executor_->run(steps, source);
  train_step_ += config_.training ? steps : 0;
  return outputs;
}

TensorList Graph::operator()(const TensorList& inputs) {
  if (!is_compiled()) compile(inputs);
  return execute(1, [&](int64_t) { return inputs; }).at(0);
}

std::vector<TensorList> Graph::run_pipelined(int64_t steps, const std::function<TensorList(int64_t)>& next_inputs) {
  if (steps <= 0) return {};
  if (!is_compiled()) compile(next_inputs(0));
  return execute(steps, next_inputs);
}

StateDict Graph::state_dict() const {
  StateDict out;
  for (const auto& [prefix, module] : modules_) {
    for (const auto& [key, t] : module->state_dict()) out.insert(prefix + "." + key, t);
  }
  for (size_t i = 0; i < optimizers_.size(); ++i) {
    const StateDict state = optimizers_[i]->state_dict();
    for (const auto& [key, t] : state) out.insert(optimizer_prefix(i) + key, t);
    for (const auto& [key, value] : state.metadata()) out.metadata()[optimizer_prefix(i) + key] = value;
    if (schedulers_[i]) out.metadata()[optimizer_prefix(i) + "lr_scheduler.last_epoch"] = std::to_string(schedulers_[i]->last_epoch());
  }
  out.metadata()["train_step"] = std::to_string(train_step_);
  return out;
}

void Graph::load_state_dict(const StateDict& state, bool strict) {
  for (const auto& [prefix, module] : modules_) {
    StateDict sub;
    for (const auto& [key, t] : state) {
      if (key.rfind(prefix + ".", 0) == 0) sub.insert(key.substr(prefix.size() + 1), t);
    }
    module->load_state_dict(sub, strict);
  }
  for (size_t i = 0; i < optimizers_.size(); ++i) {
    const std::string prefix = optimizer_prefix(i);
    StateDict sub;
    for (const auto& [key, t] : state) {
      if (key.rfind(prefix, 0) == 0) sub.insert(key.substr(prefix.size()), t);
    }
    for (const auto& [key, value] : state.metadata()) {
      if (key.rfind(prefix, 0) == 0) sub.metadata()[key.substr(prefix.size())] = value;
    }
    optimizers_[i]->load_state_dict(sub);
    auto epoch = sub.metadata().find("lr_scheduler.last_epoch");
    if (schedulers_[i] && epoch != sub.metadata().end()) schedulers_[i]->set_last_epoch(std::stoll(epoch->second));
  }
  auto step = state.metadata().find("train_step");
  if (step != state.metadata().end()) train_step_ = std::stoll(step->second);
}

void Graph::print_module(std::ostream& out, const std::string& name, const Module& module, int indent) const {
  const std::string pad(static_cast<size_t>(indent), ' ');
  const std::string inner = pad + "  ";
  out << pad << "(MODULE:" << name << ":" << module.name() << "(" << module.extra_repr() << ")): (\n";
  auto call = module_calls_.find(&module);
  if (call != module_calls_.end()) {
    out << inner << "(INPUT:_" << name << "_input.0:tensor(..., is_lazy=true, " << meta_str(call->second->input) << "))\n";
  }
  for (const auto& [key, p] : module.named_parameters(false)) {
    out << inner << "(PARAMETER:" << name << "." << key << ":tensor(..., " << meta_str(meta_of_tensor(p))
        << (p.requires_grad() ? ", requires_grad=true" : "") << ")): ()\n";
  }
  for (const auto& [key, b] : module.named_buffers(false)) {
    out << inner << "(BUFFER:" << name << "." << key << ":tensor(..., " << meta_str(meta_of_tensor(b)) << ")): ()\n";
  }
  for (const auto& [child_name, child] : module.named_children()) print_module(out, name + "." + child_name, *child, indent + 2);
  if (call != module_calls_.end() && call->second->has_output) {
    out << inner << "(OUTPUT:_" << name << "_output.0:tensor(..., is_lazy=true, " << meta_str(call->second->output) << "))\n";
  }
  out << pad << ")\n";
}

void Graph::pretty_print(std::ostream& out) const {
  const std::string graph_name = name_.empty() ? type_name() : name_;
  out << "(GRAPH:" << graph_name << ":" << type_name() << "): (\n";
  out << "  (CONFIG:config:GraphConfig(training=" << (config_.training ? "true" : "false") << "))\n";
  for (size_t i = 0; i < input_metas_.size(); ++i) {
    out << "  (INPUT:_" << graph_name << "_input." << i << ":tensor(..., " << meta_str(input_metas_[i]) << "))\n";
  }
  for (const auto& [name, module] : modules_) print_module(out, name, *module, 2);
  for (size_t i = 0; i < output_metas_.size(); ++i) {
    out << "  (OUTPUT:_" << graph_name << "_output." << i << ":tensor(..., " << meta_str(output_metas_[i]) << "))\n";
  }
  out << ")";
}

std::ostream& operator<<(std::ostream& out, const Graph& graph) {
  graph.pretty_print(out);
  return out;
}

}  // namespace flow::nn
