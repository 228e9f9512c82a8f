#include "graph/graph.h"

#include <cxxabi.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <optional>
#include <set>
#include <tuple>

#include "autograd/engine.h"
#include "core/autocast.h"
#include "core/comm/process_group.h"
#include "core/grad_mode.h"
#include "core/ops/all.h"
#include "graph/compiled_plan.h"
#include "graph/executor.h"
#include "graph/frozen_inference.h"
#include "graph/passes.h"
#include "graph/tracer.h"
#include "graph/training/activation_checkpointing.h"
#include "graph/training/gradient_accumulation.h"
#include "graph/training/loss_scaling.h"
#include "graph/training/optimizer_step.h"
#include "graph/training/pipeline_schedule.h"
#include "graph/training/rewrites.h"

namespace flow::nn {
namespace {

using graph::meta_str;
using graph::training::kGradScalerPrefix;
using graph::training::optimizer_prefix;

std::atomic<int> g_graph_count{0};

TensorMeta meta_of_tensor(const Tensor& t) { return {t.shape(), t.dtype(), t.device()}; }


// Modules in a train/eval mode, parents first: train() also sets the children, so applying them
// in order gives every module its own mode.
using ModuleModes = std::vector<std::pair<Module*, bool>>;

void apply_modes(const ModuleModes& modes) {
  for (auto& [module, training] : modes) module->train(training);
}

struct RestoreModes {
  ModuleModes modes;
  ~RestoreModes() { apply_modes(modes); }
};

// Random ops reserve generator counters while they are traced, but every run of a plan draws its
// own (graph/executor.cpp), so the trace's are handed back: compiling moves no generator, and a
// run draws the same numbers whether or not its call compiled (a resumed training run compiles at
// a later step than the run it continues).
struct RestoreGeneratorOffset {
  uint64_t offset = default_generator().offset();
  ~RestoreGeneratorOffset() { default_generator().set_offset(offset); }
};

}  // namespace

// Gives traced ops the scope of the module being called and records module inputs/outputs.
class Graph::Observer final : public ModuleCallObserver {
 public:
  Observer(Graph& graph, graph::Tracer& tracer, std::map<const Module*, std::string> names, std::map<const Module*, ModuleCall>& calls)
      : graph_(graph), tracer_(tracer), names_(std::move(names)), calls_(calls), previous_(set_module_call_observer(this)) {}
  ~Observer() override { set_module_call_observer(previous_); }

  void enter(const Module& module, const Tensor& input) override {
    auto named = names_.find(&module);
    const std::string scope = named != names_.end() ? named->second : "";
    tracer_.push_scope(scope);
    if (graph_.debug_level_ >= 1 && named != names_.end()) {
      *graph_.log_ << "(GRAPH:" << graph_.name_ << ") building module " << scope << " (" << module.name() << ")\n";
    }
    calls_.try_emplace(&module, ModuleCall{meta_of_tensor(input), {}, false});
  }
  void exit(const Module& module, const Tensor& output) override {
    tracer_.pop_scope();
    auto call = calls_.find(&module);
    if (call != calls_.end() && output.defined() && !call->second.has_output) {
      call->second.output = meta_of_tensor(output);
      call->second.has_output = true;
    }
  }

 private:
  Graph& graph_;
  graph::Tracer& tracer_;
  std::map<const Module*, std::string> names_;
  std::map<const Module*, ModuleCall>& calls_;
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
  config_.training_ = true;
}

void Graph::set_grad_scaler(std::shared_ptr<amp::GradScaler> scaler) {
  if (is_compiled()) fail("graph", "set_grad_scaler after the graph was compiled");
  loss_scaling_ = std::make_unique<graph::training::LossScaling>(std::move(scaler));
}

void Graph::train(bool on) {
  if (is_compiled()) fail("graph", name(), ": train()/eval() must be chosen before the first call compiles the graph");
  for (auto& [name, module] : modules_) module->train(on);
  traced_modes_ = module_modes();
}

std::vector<std::pair<Module*, bool>> Graph::module_modes() const {
  ModuleModes modes;
  for (auto& [prefix, module] : modules_) {
    for (auto& [path, m] : module->named_modules(prefix)) modes.emplace_back(m.get(), m->is_training());
  }
  return modes;
}

void Graph::check_checkpointed_modules() const {
  std::set<std::string> paths;
  for (auto& [prefix, module] : modules_) {
    for (auto& [path, m] : module->named_modules(prefix)) paths.insert(path);
  }
  for (const std::string& path : config_.activation_checkpointing()) {
    if (!paths.count(path)) {
      fail("graph", name_, ": set_activation_checkpointing('", path, "') names no module of the graph; paths start with a registered name, as in ",
           paths.empty() ? std::string("'model.h.0'") : "'" + *paths.rbegin() + "'");
    }
  }
}

void Graph::debug(int v_level, std::ostream& log) {
  if (v_level < 0 || v_level > 3) fail("graph", "debug level must be 0..3, got ", v_level);
  debug_level_ = v_level;
  log_ = &log;
}

const Graph::CompiledPlan& Graph::current() const {
  const CompiledPlan* latest = plans_.latest();
  if (!latest) fail("graph", type_name(), " has no compiled plan yet: call the graph once to trace and compile it");
  return *latest;
}

const graph::InputSignature& Graph::compiled_signature(int64_t index) const {
  if (index < 0 || index >= num_compiled_plans()) fail("graph", name(), " has ", num_compiled_plans(), " compiled plans, no plan ", index);
  return plans_.at(static_cast<size_t>(index)).signature;
}

const graph::proto::Job& Graph::job() const { return current().traced.job; }
const graph::Plan& Graph::plan() const { return *current().plan; }
double Graph::compile_seconds() const { return current().compile_seconds; }

graph::ExplainReport Graph::explain() const {
  if (plans_.empty()) fail("graph", type_name(), ".explain(): nothing compiled yet; call the graph once to trace and compile it");
  graph::ExplainReport report{name_, {}};
  for (size_t i = 0; i < plans_.size(); ++i) {
    const CompiledPlan& plan = plans_.at(i);
    graph::PlanExplanation explanation =
        graph::explain_plan(static_cast<int64_t>(i), plan.signature, plan.log, plan.traced.job, *plan.plan, plan.compile_seconds);
    explanation.freeze_refusal = plan.freeze_refusal;
    if (plan.ran_frozen) {
      explanation.ran_frozen = true;
      explanation.frozen_ops = graph::op_counts(plan.frozen->job());
      explanation.frozen_blocked_steps = plan.frozen->blocked_steps();
      explanation.frozen_planned_bytes = plan.frozen->plan().block_bytes;
    }
    report.plans.push_back(std::move(explanation));
  }
  return report;
}

const std::vector<TensorMeta>& Graph::input_metas() const {
  static const std::vector<TensorMeta> none;
  return plans_.latest() ? plans_.latest()->input_metas : none;
}

void Graph::trace(const graph::InputSignature& inputs, bool with_optimizers, int debug_level, Traced& traced) {
  const RestoreGeneratorOffset restore_offset;
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
  graph::training::LossScaling* const scaling = with_optimizers && loss_scaling_ && loss_scaling_->enabled() ? loss_scaling_.get() : nullptr;
  if (scaling) {
    scaling->make_variables(optimizers_, name_);
    variable_names[scaling->scale().impl()] = kGradScalerPrefix + "scale";
    variable_names[scaling->growth_tracker().impl()] = kGradScalerPrefix + "growth_tracker";
  }
  if (with_optimizers) {
    for (size_t i = 0; i < optimizers_.size(); ++i) {
      for (auto& group : optimizers_[i]->param_groups()) {
        optimizers_[i]->init_state(group.params);
        if (config_.zero_stage() > 0) optimizers_[i]->shard_state(group.params);
      }
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
  std::vector<std::string> applied;  // training rewrites, by name
  if (config_.amp_enabled()) applied.push_back("amp");
  std::vector<int> micro_batch_starts;
  {
    InterpreterGuard guard(&tracer);
    Observer observer(*this, tracer, module_names, traced.module_calls);
    TensorList lazy_inputs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const TensorMeta& meta = inputs[i].meta;
      if (!inputs[i].placement) {
        lazy_inputs.push_back(tracer.add_input(static_cast<int>(i), make_tensor(meta.shape, meta.dtype, meta.device)));
        continue;
      }
      lazy_inputs.push_back(tracer.add_global_input(static_cast<int>(i), meta, *inputs[i].placement, inputs[i].sbp));
    }
    if (debug_level >= 1) *log_ << "(GRAPH:" << name_ << ") building graph\n";
    const TensorList outputs = [&] {
      const autocast amp(config_.amp_dtype(), config_.amp_enabled());
      std::optional<autograd::LossScaleGuard> loss_scale;
      if (scaling) loss_scale.emplace(scaling->scale());
      if (!with_optimizers) return build(lazy_inputs);
      return graph::training::build_micro_batches([this](const TensorList& in) { return build(in); }, lazy_inputs,
                                                  config_.gradient_accumulation_steps(), tracer.job(), micro_batch_starts, name_);
    }();
    if (with_optimizers) {
      graph::training::UpdateTrace updates =
          graph::training::trace_updates({optimizers_, config_.gradient_accumulation_steps(), config_.zero_stage(), scaling, tracer, name_});
      traced.trained_params = std::move(updates.trained_params);
      applied.insert(applied.end(), updates.applied.begin(), updates.applied.end());
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      tracer.add_output(static_cast<int>(i), outputs[i]);
      traced.output_layouts.push_back(graph::guard_of(outputs[i]));
    }
  }
  tracer.release();
  if (graph::training::schedule_pipeline(tracer.job(), micro_batch_starts, tracer.gradient_nodes(), module_params,
                                         config_.pipeline_schedule(), name_, debug_level, *log_)) {
    applied.push_back("pipeline_schedule");
  }
  traced.training_rewrites = graph::training::in_pipeline_order(applied);
  traced.gradient_nodes = tracer.gradient_nodes();
  traced.job.Clear();
  traced.job.Swap(&tracer.job());
  traced.fixed = tracer.captured();
}

Graph::CompiledPlan& Graph::plan_for(const TensorList& inputs) {
  if (name_.empty()) name_ = type_name() + "_" + std::to_string(g_graph_count++);
  graph::InputSignature signature = graph::signature_of(inputs, name_);
  if (CompiledPlan* cached = plans_.find(signature)) return *cached;
  std::vector<std::string> guard_failures = plans_.guard_failures(signature, config_.cache_limit(), name_);
  if (debug_level_ >= 1 && !plans_.empty()) {
    // torch._dynamo's recompile log: the new signature, then the guard each cached plan fails.
    *log_ << "(GRAPH:" << name_ << ") recompiling (plan " << plans_.size() << ", cache limit " << config_.cache_limit()
          << ") for input signature " << graph::signature_str(signature) << "\n";
    for (size_t i = 0; i < guard_failures.size(); ++i) *log_ << "(GRAPH:" << name_ << ")   plan " << i << " guard failed: " << guard_failures[i] << "\n";
  }
  return compile(std::move(signature), std::move(guard_failures));
}

Graph::CompiledPlan& Graph::compile(graph::InputSignature signature, std::vector<std::string> guard_failures) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto phase_start = start;
  // Seconds since the previous phase ended.
  const auto phase_seconds = [&phase_start] {
    const auto now = Clock::now();
    const double seconds = std::chrono::duration<double>(now - phase_start).count();
    phase_start = now;
    return seconds;
  };
  auto compiled = std::make_unique<CompiledPlan>();
  compiled->signature = std::move(signature);
  graph::CompileLog& log = compiled->log;
  log.guard_failures = std::move(guard_failures);
  compiled->input_metas = graph::metas_of(compiled->signature);
  // Every plan traces the modules in one mode: that of train()/eval(), else the modes at the first
  // compile, whatever eager code (another graph's eval(), say) set since.
  {
    const RestoreModes restore{module_modes()};
    if (traced_modes_.empty()) traced_modes_ = restore.modes;
    apply_modes(traced_modes_);
    trace(compiled->signature, true, debug_level_, compiled->traced);
  }
  Traced& traced = compiled->traced;
  traced.job.set_training(config_.training());
  log.traced_nodes = traced.job.nodes_size();
  log.traced_ops = graph::op_counts(traced.job);
  log.training_rewrites = traced.training_rewrites;
  log.trace_seconds = phase_seconds();
  graph::PassContext context{traced.fixed};
  graph::PassManager passes;
  for (const auto& [pass_name, pass] : config_.user_passes()) passes.add(pass_name, pass);
  passes.add(graph::default_passes()).add("fuse_update_cast", graph::fuse_update_cast).add("merge_inplace_updates", graph::merge_inplace_updates);
  if (!config_.activation_checkpointing().empty()) {
    check_checkpointed_modules();
    // After CSE and DCE, which would merge the clones back into their originals.
    passes.insert_before("elementwise_fusion", "activation_checkpointing",
                         [scopes = config_.activation_checkpointing(), &gradient = traced.gradient_nodes](graph::proto::Job& job, graph::PassContext& ctx) {
                           graph::training::checkpoint_activations(job, ctx, scopes, gradient);
                         });
  }
  log.passes = passes.run(traced.job, context, debug_level_, log_);
  for (const auto& node : traced.job.nodes()) {
    if (node.op() != graph::kVariableOp || !node.attrs().count("cast_of")) continue;
    const Tensor& parameter = traced.fixed.at(node.attrs().at("cast_of").s());
    compiled->cast_copies.push_back({parameter, traced.fixed.at(node.name()), parameter.storage()->version()});
  }
  log.passes_seconds = phase_seconds();
  compiled->plan = std::make_unique<graph::Plan>(graph::make_plan(traced.job));
  log.plan_seconds = phase_seconds();
  if (debug_level_ >= 1) *log_ << "(GRAPH:" << name_ << ") plan: " << compiled->plan->summary() << "\n";
  if (!config_.inference_freezing_enabled()) {
    compiled->freeze_refusal = "turned off (config().enable_inference_freezing(false))";
  } else if (config_.training()) {
    compiled->freeze_refusal = "a training graph (it has an optimizer)";
  } else {
    compiled->freeze_refusal = graph::FrozenInference::refusal(traced.job, traced.fixed);
  }
  if (compiled->freeze_refusal.empty()) {
    compiled->previous_versions = graph::storage_versions(traced.fixed);
  } else {
    compiled->executor = std::make_unique<graph::Executor>(traced.job, *compiled->plan, traced.fixed);
  }
  log.runtime_seconds = phase_seconds();
  compiled->compile_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (debug_level_ >= 1) *log_ << "(GRAPH:" << name_ << ") compiled in " << compiled->compile_seconds << " s\n";
  return plans_.add(std::move(compiled));
}

bool Graph::is_global() const {
  for (const auto& [prefix, module] : modules_) {
    for (const auto& [key, t] : module->state_dict()) {
      if (t.is_global()) return true;
    }
  }
  return false;
}

graph::proto::Job Graph::trace_inference(const std::vector<TensorMeta>& input_metas, std::map<std::string, Tensor>& fixed) {
  if (!is_compiled()) fail("export", name(), " has not run yet: call the graph once so that its inputs are known");
  // Each global state tensor's handle holds its gathered whole value while tracing, then gets its
  // global self back (the same handle: modules and optimizers keep referring to it); the Job's
  // variables keep the whole values.
  struct LocalStandIns {
    std::vector<std::pair<std::shared_ptr<TensorImpl>, TensorImpl>> saved;
    std::map<TensorImpl*, Tensor> whole;
    ~LocalStandIns() {
      for (auto& [impl, global] : saved) *impl = std::move(global);
    }
  } stand_ins;
  for (const auto& [prefix, module] : modules_) {
    std::vector<std::pair<std::string, Tensor>> state = module->named_parameters();
    for (auto& named : module->named_buffers()) state.push_back(named);
    for (const auto& [key, t] : state) {
      if (!t.is_global()) continue;
      const Tensor whole = t.whole_local();
      stand_ins.saved.emplace_back(t.impl_ptr(), *t.impl());
      stand_ins.whole[t.impl()] = whole;
      TensorImpl& impl = *t.impl();
      impl.shape = whole.shape();
      impl.strides = whole.strides();
      impl.offset = whole.storage_offset();
      impl.device = whole.device();
      impl.storage = whole.storage();
      impl.global.reset();
    }
  }
  // Eval mode while tracing, then every module back to its own mode.
  const RestoreModes restore{module_modes()};
  for (auto& [prefix, module] : modules_) module->eval();
  Traced traced;
  graph::InputSignature signature;
  for (const TensorMeta& meta : input_metas) signature.push_back({meta, std::nullopt, {}});
  trace(signature, false, 0, traced);
  traced.job.set_training(false);
  fixed = std::move(traced.fixed);
  for (auto& [name, t] : fixed) {
    auto gathered = stand_ins.whole.find(t.impl());
    if (gathered != stand_ins.whole.end()) t = gathered->second;
  }
  return std::move(traced.job);
}

std::vector<TensorList> Graph::execute(CompiledPlan& plan, int64_t steps, const std::function<TensorList(int64_t)>& next_inputs) {
  const graph::PieceSource source = [&](int64_t piece, TensorList& inputs, std::map<std::string, Tensor>& feeds) {
    inputs = next_inputs(piece);
    if (piece > 0) {
      const graph::InputSignature signature = graph::signature_of(inputs, name_);
      if (!(signature == plan.signature)) {
        fail("graph", name_, ": run_pipelined runs one plan, but step ", piece, " changes the input signature (",
             graph::signature_change(plan.signature, signature), "); split the run where the signature changes");
      }
    }
    // The Job of a global input reads this rank's piece.
    for (auto& t : inputs) {
      const Tensor piece = t.is_global() ? t.impl()->global->local : t;
      t = piece.defined() ? piece.contiguous() : piece;
    }
    feeds = graph::training::next_step_feeds(optimizers_, schedulers_, plan.traced.trained_params);
  };
  // A parameter written outside this plan (an eager step, load_state_dict, another graph) since
  // its rounded copy was made: the copy is made again before the plan reads it.
  for (auto& cast : plan.cast_copies) {
    if (cast.parameter.storage()->version() != cast.version) detail::copy_into(cast.copy, cast.parameter);
  }
  std::vector<TensorList> outputs = executor_for_call(plan).run(steps, source);
  for (auto& cast : plan.cast_copies) cast.version = cast.parameter.storage()->version();
  const std::vector<graph::InputGuard>& layouts = plan.traced.output_layouts;
  for (TensorList& step_outputs : outputs) {
    step_outputs.resize(layouts.size());
    for (size_t i = 0; i < step_outputs.size(); ++i) {
      if (!layouts[i].placement) continue;
      step_outputs[i] = distributed::make_global(layouts[i].meta, *layouts[i].placement, layouts[i].sbp, step_outputs[i]);
    }
  }
  train_step_ += config_.training() ? steps : 0;
  if (loss_scaling_) loss_scaling_->publish();
  return outputs;
}

graph::Executor& Graph::executor_for_call(CompiledPlan& plan) {
  plan.ran_frozen = false;
  if (!plan.freeze_refusal.empty()) return *plan.executor;
  std::vector<uint64_t> versions = graph::storage_versions(plan.traced.fixed);
  if (plan.frozen && plan.frozen->fresh(versions)) {
    plan.ran_frozen = true;
    return plan.frozen->executor();
  }
  plan.frozen.reset();
  const bool unchanged = versions == plan.previous_versions;
  plan.previous_versions = versions;
  if (unchanged) {
    plan.frozen = std::make_unique<graph::FrozenInference>(plan.traced.job, plan.traced.fixed, std::move(versions));
    if (debug_level_ >= 1) {
      *log_ << "(GRAPH:" << name_ << ") frozen for inference: " << plan.frozen->blocked_steps() << " ops on blocked layouts\n";
    }
    plan.ran_frozen = true;
    return plan.frozen->executor();
  }
  if (!plan.executor) plan.executor = std::make_unique<graph::Executor>(plan.traced.job, *plan.plan, plan.traced.fixed);
  return *plan.executor;
}

bool Graph::ran_frozen() const { return current().ran_frozen; }
int64_t Graph::frozen_blocked_steps() const { return current().ran_frozen ? current().frozen->blocked_steps() : 0; }

TensorList Graph::operator()(const TensorList& inputs) {
  CompiledPlan& plan = plan_for(inputs);
  return execute(plan, 1, [&](int64_t) { return inputs; }).at(0);
}

std::vector<TensorList> Graph::run_pipelined(int64_t steps, const std::function<TensorList(int64_t)>& next_inputs) {
  if (steps <= 0) return {};
  const TensorList first = next_inputs(0);
  CompiledPlan& plan = plan_for(first);
  return execute(plan, steps, [&](int64_t step) { return step == 0 ? first : next_inputs(step); });
}

}  // namespace flow::nn
