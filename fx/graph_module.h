#pragma once
// GraphModule: a traced module as a Job plus the tensors behind its get_attr nodes, with an
// fx::Graph view to read and edit it, and a call that runs the (possibly edited) Job on flow's
// plan compiler and actor runtime, as nn::Graph runs its Jobs.
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "fx/graph.h"
#include "graph/passes.h"
#include "job/plan.h"
#include "nn/module.h"

namespace flow::fx {

class GraphModule {
 public:
  // attrs: the tensors behind the Job's variable and constant nodes, by node name (a traced
  // module's own parameters and buffers: the GraphModule shares them, it does not copy them).
  GraphModule(graph::proto::Job job, std::map<std::string, Tensor> attrs);
  ~GraphModule();
  GraphModule(GraphModule&&) noexcept;
  GraphModule& operator=(GraphModule&&) noexcept;

  Graph& graph();
  const Graph& graph() const;
  const graph::proto::Job& job() const;
  const std::map<std::string, Tensor>& attrs() const;

  // torch.fx's table: opcode, name, target, args, kwargs, one row per node.
  void print_tabular(std::ostream& out = std::cout) const;

  // Lints the graph and compiles a plan and executor for the Job as it is now. Calls do it
  // themselves after an edit or for inputs of new metas.
  void recompile();
  // Runs the Job on the runtime (no autograd); outputs are in result-index order.
  TensorList operator()(const TensorList& inputs);
  template <typename... Rest>
  TensorList operator()(const Tensor& first, const Rest&... rest) {
    return (*this)(TensorList{first, rest...});
  }
  // The plan of the latest compile (an error before the first).
  const graph::Plan& plan() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

using ForwardFn = std::function<TensorList(const TensorList&)>;

// Traces module(inputs[0]) (inference: no autograd; the module's train/eval mode as it is) into
// a GraphModule. Parameters and buffers become get_attr nodes named by their state names
// ("0.weight"); ops are named in their module's scope ("0.conv2d"); other eager tensors the
// forward reads become constants. Inputs give only metas: a meta input (kMeta) stands for a
// tensor on the device of the module's parameters, so a 100x3x224x224 example costs nothing.
// The module must be held by a shared_ptr (its submodules are walked).
GraphModule symbolic_trace(nn::Module& module, const TensorList& inputs);
// Traces forward(inputs), a multi-input call of module.
GraphModule symbolic_trace(nn::Module& module, const TensorList& inputs, const ForwardFn& forward);
// Traces a function of tensors (e.g. a pattern for replace_pattern).
GraphModule symbolic_trace(const ForwardFn& function, const TensorList& inputs);

// A Job pass (graph/passes.h) written against the fx API: the pass sees an fx::Graph view of the
// Job being compiled and the tensors behind its variables and constants, and edits it in place.
// Register it with nn::Graph::config().add_pass(name, fx::graph_pass(...)).
graph::PassFn graph_pass(std::function<void(Graph&)> pass);

}  // namespace flow::fx
