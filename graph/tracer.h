#pragma once
// The lazy interpreter: while a Graph traces build(), every functional op is checked exactly as
// in eager mode and appended to a Job instead of being run. Lazy tensors carry meta (shape,
// strides, dtype, device) and the name of their value in the Job, but no data.
#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "core/interpreter.h"
#include "core/tensor.h"
#include "job/job.h"

namespace flow {
// The Job value a lazy tensor stands for (core forward-declares it in TensorImpl).
struct LazyInfo {
  std::string value;  // "<node>:<index>"
};
}  // namespace flow

namespace flow::graph {

class Tracer final : public Interpreter {
 public:
  // variable_names: the eager tensors (parameters, buffers, optimizer state) that become Job
  // variables, by state name. Other eager tensors an op reads are captured as constants.
  // debug_level >= 2 logs every op created (>= 3 with its source location) to log.
  Tracer(const std::string& job_name, std::map<TensorImpl*, std::string> variable_names, int debug_level, std::ostream& log);
  ~Tracer() override;
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // Records an op on local tensors (or on the pieces of global ones) as a node.
  TensorList apply(const OpDef& op, const TensorList& inputs, const Attrs& attrs) override;
  // An op with a global input (or a global conversion) goes through the SPMD dispatch
  // (core/global/dispatch.h), which picks its sbp signature and boxes its inputs: the boxing
  // collectives and the op on this rank's pieces come back to apply(), so the Job is this rank's
  // part of the logical program. Nodes computing a global value's piece carry its placement and
  // sbp in their output descriptions.
  TensorList apply_global(const OpDef& op, const TensorList& inputs, const Attrs& attrs) override;

  // A lazy tensor for argument `index` of the graph call, with example's meta.
  Tensor add_input(int index, const Tensor& example);
  // A lazy global tensor of logical meta `meta` for a global argument: the Job's input is this
  // rank's piece (a rank off the placement has none, and no input node).
  Tensor add_global_input(int index, const TensorMeta& meta, const Placement& placement, const NdSbp& nd_sbp);
  // A lazy 0-d tensor fed with a new value on every run (an optimizer's learning rate).
  Tensor add_feed(const std::string& key, DType dtype, Device device);
  // A global value's output node reads its piece (the caller makes the result global again); a
  // rank without a piece of it has no output node.
  void add_output(int index, const Tensor& value);

  // The nodes that autograd's backward created (gradient computations), by name.
  const std::set<std::string>& gradient_nodes() const { return gradient_nodes_; }

  // Module scopes name the nodes created inside them ("model.linear_relu_stack.0").
  void push_scope(const std::string& scope);
  void pop_scope();

  // The Job value of t, capturing an eager tensor as a variable or constant on first use.
  std::string value_of(const Tensor& t);
  // Clears the lazy marks put on eager tensors (variables written in place while tracing are
  // marked with their newest value); the Tracer's destructor does it too.
  void release();

  proto::Job& job() { return job_; }
  // Eager tensors behind variable and constant nodes, by node name.
  const std::map<std::string, Tensor>& captured() const { return captured_; }

 private:
  // An input node of meta `meta`; a global argument's (its piece) also names placement and sbp.
  Tensor input_node(int index, const TensorMeta& meta, const Placement* placement, const NdSbp& nd_sbp);
  // Captures the eager tensor t as a variable (named after `owner`, the tensor the state is
  // registered as) or a constant node.
  std::string capture(const Tensor& t, const TensorImpl* owner);
  // Marks each node made since `first` that computes a piece of a global output with its
  // placement and sbp.
  void annotate_pieces(const TensorList& outputs, int first);
  std::string unique_name(const std::string& base);
  std::string current_scope() const;
  void mark(const Tensor& t, const std::string& value);
  void log_node(const proto::Node& node) const;

  proto::Job job_;
  std::map<TensorImpl*, std::string> variable_names_;
  std::map<std::string, Tensor> captured_;
  std::vector<Tensor> marked_eager_;
  std::vector<std::string> scopes_;
  std::set<std::string> gradient_nodes_;
  std::map<std::string, int> name_counts_;
  int debug_level_;
  std::ostream& log_;
  int global_depth_ = 0;  // > 0 inside the SPMD dispatch: its nodes are logged once annotated
};

// Whether t is a lazy tensor of a trace, or a global tensor whose piece on this rank is one.
bool is_traced(const Tensor& t);

// The source location of the user's call into flow (first stack frame outside flow's
// libraries), for debug level 3; empty when it cannot be told.
std::string caller_location();

}  // namespace flow::graph
