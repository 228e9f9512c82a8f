#pragma once
// torch.fx's Interpreter, Transformer and ShapeProp over a GraphModule.
//
// Interpreter runs the graph node by node on real (or meta) tensors through flow's functional
// dispatch point, so every op runs its eager kernel (a meta tensor runs only its meta inference).
// Subclasses override the per-node hooks, as with torch.fx.Interpreter. Transformer runs the same
// hooks under the lazy tracer, so what they return is recorded into a new GraphModule.
#include <map>
#include <memory>
#include <string>

#include "fx/graph_module.h"

namespace flow::graph {
class Tracer;
}

namespace flow::fx {

class Interpreter {
 public:
  explicit Interpreter(GraphModule& module);
  virtual ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Runs every node in order (no autograd) and returns the results in result-index order.
  TensorList run(const TensorList& inputs);

  // Runs one node: fetches its arguments and calls the hook of its opcode. Returns the node's
  // outputs (an output node returns the value it gives back).
  virtual TensorList run_node(const Node& node);
  // Input `index` of the call.
  virtual TensorList placeholder(const Node& node, const Tensor& input);
  // The tensor behind the node (a parameter, buffer or constant).
  virtual TensorList get_attr(const Node& node);
  // The op node.target() on args, through flow::apply.
  virtual TensorList call_function(const Node& node, const TensorList& args, const Attrs& kwargs);
  virtual TensorList output(const Node& node, const TensorList& args);

 protected:
  GraphModule& module() { return module_; }
  // The values computed so far, by node name (freed after their last reader).
  const std::map<std::string, TensorList>& env() const { return env_; }

 private:
  GraphModule& module_;
  std::map<std::string, TensorList> env_;
  const TensorList* inputs_ = nullptr;
};

// Builds a new GraphModule by interpreting this one under the lazy tracer: each hook's result is
// recorded as the new graph's node(s). Override call_function to emit other ops, e.g.
// `if (node.target() == "relu") return {flow::gelu(args[0])};`. Node names and module scopes
// are kept where the ops are.
class Transformer : public Interpreter {
 public:
  explicit Transformer(GraphModule& module);
  ~Transformer() override;
  GraphModule transform();

  TensorList run_node(const Node& node) override;

 private:
  graph::Tracer* tracer_ = nullptr;
};

// Runs the graph on example inputs and writes every node's output metas (shape, dtype, device)
// into its node.meta() (the Job's output descriptions). On meta inputs (kMeta) no kernel runs and
// parameters stand in as meta tensors (their get_attr nodes are then described on meta; a later
// GraphModule call re-infers the metas for its inputs), so a 100x3x224x224 input costs nothing.
class ShapeProp : public Interpreter {
 public:
  explicit ShapeProp(GraphModule& module);
  TensorList propagate(const TensorList& inputs);

  TensorList run_node(const Node& node) override;
  TensorList get_attr(const Node& node) override;

 private:
  bool on_meta_ = false;
};

}  // namespace flow::fx
