#pragma once
// nn::Graph: the static-graph twin of an eager program. A subclass registers eager modules (and
// an optimizer) and writes build(); the first call traces build() into a Job, runs the passes,
// plans tasks and memory, and starts an actor runtime; later calls only feed inputs and run.
// Variables are the modules' own parameters and buffers: training in the graph updates the
// eager module, and eager changes are seen by the graph.
#include <chrono>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graph/job.h"
#include "graph/plan.h"
#include "nn/module.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"

namespace flow::graph {
class Executor;
}

namespace flow::nn {

struct GraphConfig {
  bool training = false;  // set by add_optimizer
};

class Graph {
 public:
  Graph();
  virtual ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // The computation, called on lazy tensors to trace the Job: once by the first call (and again
  // by deploy export, which traces it for inference).
  virtual TensorList build(const TensorList& inputs) = 0;

  // The first call traces and compiles; later calls run the compiled plan. Inputs must have the
  // shapes, dtypes and devices of the first call.
  TensorList operator()(const TensorList& inputs);
  template <typename... Rest>
  TensorList operator()(const Tensor& first, const Rest&... rest) {
    return (*this)(TensorList{first, rest...});
  }
  // Runs `steps` calls as one pipelined run: the input actor calls next_inputs(k) for step k
  // while the compute actors still work on step k-1. Returns every step's outputs.
  std::vector<TensorList> run_pipelined(int64_t steps, const std::function<TensorList(int64_t)>& next_inputs);

  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_module(name, module);
    return module;
  }
  // Trains in the graph: build() calls loss.backward(), and every parameter that receives a
  // gradient is updated by the optimizer's update ops (the scheduler steps after every call).
  void add_optimizer(std::shared_ptr<optim::Optimizer> optimizer, std::shared_ptr<optim::LRScheduler> scheduler = nullptr);

  // Train/eval mode of the registered modules; fixed once the graph is compiled.
  void train(bool on = true);
  void eval() { train(false); }
  const GraphConfig& config() const { return config_; }

  // 0: quiet; 1: build and compile progress per module and pass, plan summary with the planned
  // peak memory; 2: also every op created with its inputs, outputs, device and SBP; 3: also
  // each op's source location and the Job after every pass.
  void debug(int v_level = 1, std::ostream& log = std::cerr);

  // Module state (by registered name), optimizer state and the train step, so training resumes
  // exactly.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state, bool strict = true);
  int64_t train_step() const { return train_step_; }

  bool is_compiled() const { return executor_ != nullptr; }
  // The optimised Job and its plan; an error before the first call.
  const graph::proto::Job& job() const;
  const graph::Plan& plan() const;
  double compile_seconds() const { return compile_seconds_; }
  // The metas of the inputs the graph was traced with (empty before the first call).
  const std::vector<TensorMeta>& input_metas() const { return input_metas_; }
  // Traces build() again for inference on inputs of the given metas, into a new Job (no passes):
  // modules in eval mode, no optimizer update; gradient ops a training build() emits are dead.
  // fixed receives the eager tensors behind variable and constant nodes. Used by deploy export;
  // an error before the first call.
  graph::proto::Job trace_inference(const std::vector<TensorMeta>& input_metas, std::map<std::string, Tensor>& fixed);
  // "<Type>_<n>", numbered per process like OneFlow's graph names.
  const std::string& name() const { return name_; }
  std::string type_name() const;

  void pretty_print(std::ostream& out) const;

 private:
  struct ModuleCall;
  class Observer;

  void add_module(const std::string& name, std::shared_ptr<Module> module);
  void compile(const TensorList& inputs);
  // Traces build() on lazy inputs of these metas into job; returns the output metas.
  std::vector<TensorMeta> trace(const std::vector<TensorMeta>& input_metas, bool with_optimizers, int debug_level,
                                graph::proto::Job& job, std::map<std::string, Tensor>& fixed);
  void check_inputs(const TensorList& inputs) const;
  std::map<std::string, Tensor> next_feeds();
  std::vector<TensorList> execute(int64_t steps, const std::function<TensorList(int64_t)>& next_inputs);
  void print_module(std::ostream& out, const std::string& name, const Module& module, int indent) const;

  std::string name_;
  GraphConfig config_;
  int debug_level_ = 0;
  std::ostream* log_ = &std::cerr;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> modules_;
  std::vector<std::shared_ptr<optim::Optimizer>> optimizers_;
  std::vector<std::shared_ptr<optim::LRScheduler>> schedulers_;
  std::vector<TensorList> trained_params_;  // per optimizer: parameters updated in the graph
  std::vector<TensorMeta> input_metas_;
  std::vector<TensorMeta> output_metas_;
  std::map<const Module*, std::unique_ptr<ModuleCall>> module_calls_;

  graph::proto::Job job_;
  std::unique_ptr<graph::Plan> plan_;
  std::map<std::string, Tensor> fixed_;
  std::unique_ptr<graph::Executor> executor_;
  double compile_seconds_ = 0;
  int64_t train_step_ = 0;
};

std::ostream& operator<<(std::ostream& out, const Graph& graph);

}  // namespace flow::nn
