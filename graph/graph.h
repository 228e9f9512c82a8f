#pragma once
// nn::Graph: the static-graph twin of an eager program. A subclass registers eager modules (and
// an optimizer) and writes build(); the first call traces build() into a Job, runs the passes,
// plans tasks and memory, and starts an actor runtime; later calls only feed inputs and run.
// A call with a new input signature (graph/signature.h) compiles another plan, as
// torch.compile's guards do, up to config().cache_limit() plans.
// Variables are the modules' own parameters and buffers: training in the graph updates the
// eager module, and eager changes are seen by the graph. Every plan shares them and the
// optimizer state.
#include <chrono>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "graph/explain.h"
#include "graph/graph_config.h"
#include "graph/passes.h"
#include "graph/plan_cache.h"
#include "graph/signature.h"
#include "job/job.h"
#include "job/plan.h"
#include "nn/module.h"
#include "optim/grad_scaler.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"

namespace flow::graph {
class Executor;
namespace training {
class LossScaling;
}
}  // namespace flow::graph

namespace flow::nn {

class Graph {
 public:
  Graph();
  virtual ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // The computation, called on lazy tensors to trace a Job: once per input signature (and again
  // by deploy export, which traces it for inference).
  virtual TensorList build(const TensorList& inputs) = 0;

  // A call with an input signature seen before runs its compiled plan; a new signature traces
  // and compiles another plan first.
  TensorList operator()(const TensorList& inputs);
  template <typename... Rest>
  TensorList operator()(const Tensor& first, const Rest&... rest) {
    return (*this)(TensorList{first, rest...});
  }
  // Runs `steps` calls as one pipelined run: the input actor calls next_inputs(k) for step k
  // while the compute actors still work on step k-1. Returns every step's outputs. One run is
  // one plan: every step must have the signature of step 0 (a flow::Error otherwise).
  std::vector<TensorList> run_pipelined(int64_t steps, const std::function<TensorList(int64_t)>& next_inputs);

  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_module(name, module);
    return module;
  }
  // Trains in the graph: build() calls loss.backward(), and every parameter that receives a
  // gradient is updated by the optimizer's update ops (the scheduler steps after every call).
  void add_optimizer(std::shared_ptr<optim::Optimizer> optimizer, std::shared_ptr<optim::LRScheduler> scheduler = nullptr);
  // Dynamic loss scaling inside the Job, as OneFlow's nn.Graph.set_grad_scaler: build()'s
  // loss.backward() starts from the scale instead of one, every optimizer's gradients are divided
  // by it, an optimizer whose gradients then hold an inf or NaN leaves its parameters and state as
  // they were, and the scale backs off after such a call and grows after growth_interval clean
  // calls in a row (amp::GradScaler's rules; the scale and growth tracker are float32 Job
  // variables). After each call the scaler holds the Job's scale and growth tracker (get_scale()),
  // and state_dict() keeps them. As in OneFlow's Graph, a skipped call still advances the
  // optimizers' step counts and schedulers (an eager GradScaler, as PyTorch's, does not advance the
  // step count of a skipped optimizer.step()). Before the first call; the graph needs an
  // optimizer and local parameters (not global ones yet). A disabled scaler changes nothing.
  void set_grad_scaler(std::shared_ptr<amp::GradScaler> scaler);

  // Train/eval mode of the registered modules; fixed once the graph is compiled (every plan
  // traces in it, whatever eager code sets later).
  void train(bool on = true);
  void eval() { train(false); }
  const GraphConfig& config() const { return config_; }
  GraphConfig& config() { return config_; }

  // 0: quiet; 1: build and compile progress per module and pass, plan summary with the planned
  // peak memory, each recompilation and the input change behind it; 2: also every op created
  // with its inputs, outputs, device and SBP; 3: also each op's source location and the Job
  // after every pass.
  void debug(int v_level = 1, std::ostream& log = std::cerr);

  // Module state (by registered name), optimizer state and the train step, so training resumes
  // exactly.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state, bool strict = true);
  int64_t train_step() const { return train_step_; }

  bool is_compiled() const { return !plans_.empty(); }
  // Whether a registered module holds global parameters or buffers (laid out over ranks).
  bool is_global() const;
  // Plans compiled so far, one per input signature (each compile counts once).
  int64_t num_compiled_plans() const { return static_cast<int64_t>(plans_.size()); }
  // The signature of plan `index`, in compile order.
  const graph::InputSignature& compiled_signature(int64_t index) const;
  // Of the plan the latest call ran (an error before the first call): its optimised Job, its
  // plan, its compile time and its input metas (empty before the first call). A frozen inference
  // plan runs a copy of that Job (explain() describes it; see enable_inference_freezing).
  const graph::proto::Job& job() const;
  const graph::Plan& plan() const;
  double compile_seconds() const;
  const std::vector<TensorMeta>& input_metas() const;
  // Whether the latest call ran its plan frozen (config().enable_inference_freezing), and how many
  // of the frozen Job's ops ran on blocked layouts then (0 when it ran unfrozen).
  bool ran_frozen() const;
  int64_t frozen_blocked_steps() const;
  // What compiling did, for every plan in compile order, like torch._dynamo.explain: ops traced,
  // each pass's fusions, folds and eliminations, reused and planned memory, time per compile
  // phase, and the guards behind each recompilation. Printable; an error before the first call.
  graph::ExplainReport explain() const;
  // Traces build() again for inference on inputs of the given metas, into a new Job (no passes):
  // modules in eval mode, no optimizer update; gradient ops a training build() emits are dead.
  // fixed receives the eager tensors behind variable and constant nodes. Used by deploy export
  // (with the first compiled signature); an error before the first call. A global model is
  // traced whole and local: every rank holding a piece calls this, each global parameter and
  // buffer is gathered and stands in for the global tensor while tracing.
  graph::proto::Job trace_inference(const std::vector<TensorMeta>& input_metas, std::map<std::string, Tensor>& fixed);
  // "<Type>_<n>", numbered per process like OneFlow's graph names.
  const std::string& name() const { return name_; }
  std::string type_name() const;

  void pretty_print(std::ostream& out) const;

 private:
  struct ModuleCall;
  struct Traced;
  struct CompiledPlan;
  class Observer;

  void add_module(const std::string& name, std::shared_ptr<Module> module);
  // The cached plan for these inputs' signature, compiled first if it is new.
  CompiledPlan& plan_for(const TensorList& inputs);
  // Compiles and caches the plan of `signature`; guard_failures: why it fails each earlier plan's
  // guards.
  CompiledPlan& compile(graph::InputSignature signature, std::vector<std::string> guard_failures);
  // Traces build() on lazy inputs of this signature (global inputs: lazy global tensors whose
  // pieces are the Job's inputs).
  void trace(const graph::InputSignature& inputs, bool with_optimizers, int debug_level, Traced& traced);
  const CompiledPlan& current() const;
  // Every registered module and submodule with its train/eval mode, parents first.
  std::vector<std::pair<Module*, bool>> module_modes() const;
  // Throws a flow::Error for a config().set_activation_checkpointing path that names no module.
  void check_checkpointed_modules() const;
  std::vector<TensorList> execute(CompiledPlan& plan, int64_t steps, const std::function<TensorList(int64_t)>& next_inputs);
  // The frozen plan's executor or the unfrozen one (config().enable_inference_freezing).
  graph::Executor& executor_for_call(CompiledPlan& plan);
  void print_module(std::ostream& out, const std::string& name, const Module& module, int indent) const;

  std::string name_;
  GraphConfig config_;
  int debug_level_ = 0;
  std::ostream* log_ = &std::cerr;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> modules_;
  std::vector<std::shared_ptr<optim::Optimizer>> optimizers_;
  std::vector<std::shared_ptr<optim::LRScheduler>> schedulers_;
  std::unique_ptr<graph::training::LossScaling> loss_scaling_;  // set_grad_scaler's
  graph::PlanCache<CompiledPlan> plans_;
  std::vector<std::pair<Module*, bool>> traced_modes_;  // the modes every plan traces in
  int64_t train_step_ = 0;
};

std::ostream& operator<<(std::ostream& out, const Graph& graph);

}  // namespace flow::nn
