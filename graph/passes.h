#pragma once
// Job -> Job passes and the pass manager that runs them in order, optionally dumping the Job
// after each one (debug level 3, or the directory in FLOW_GRAPH_DUMP_DIR).
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "graph/job.h"

namespace flow::graph {

struct PassContext {
  // The eager tensors behind variable and constant nodes, by node name; constant folding adds
  // its results here.
  std::map<std::string, Tensor>& fixed;
};

using PassFn = std::function<void(proto::Job& job, PassContext& context)>;

class PassManager {
 public:
  PassManager& add(std::string name, PassFn pass);
  // Runs every pass in order. debug_level >= 1 logs each pass with the node count it leaves;
  // >= 3 (or FLOW_GRAPH_DUMP_DIR) dumps the Job text after each pass.
  void run(proto::Job& job, PassContext& context, int debug_level = 0, std::ostream* log = nullptr) const;
  std::vector<std::string> names() const;

 private:
  std::vector<std::pair<std::string, PassFn>> passes_;
};

// The default pipeline: conv + batch-norm folding, constant folding, CSE, copy elimination, DCE,
// unused pool indices elimination, element-wise fusion.
PassManager default_passes();

// Removes nodes whose values no output or side effect (in-place write) needs. Graph inputs stay.
void dead_code_elimination(proto::Job& job, PassContext& context);
// Turns max_pool2d nodes whose argmax indices nothing reads (inference, or the forward part of
// an exported training graph) into max_pool2d_inference, which computes the values only.
void unused_pool_indices_elimination(proto::Job& job, PassContext& context);
// Merges nodes computing the same op on the same inputs with the same attributes (never random
// ops, allocations, in-place ops, or values some op later writes in place).
void common_subexpression_elimination(proto::Job& job, PassContext& context);
// Evaluates nodes whose inputs are all constants (or that have no inputs) once, at compile time,
// replacing them by constants. Never random ops, allocations, or values written in place.
void constant_folding(proto::Job& job, PassContext& context);
// Folds batch_norm_eval into the conv2d feeding it (when that conv has no other reader and all
// weights and statistics are variables or constants): the conv gets scaled weights and a bias
// computed by ops on the variables, and the batch norm disappears.
void conv_batch_norm_folding(proto::Job& job, PassContext& context);
// Lets the readers of a same-dtype, same-device copy read its source instead, when neither is
// ever written in place and the copy is not a graph output (e.g. the clone autograd makes of a
// leaf's first gradient); DCE then drops the copy.
void copy_elimination(proto::Job& job, PassContext& context);
// Replaces chains of element-wise nodes with one output shape by fused_elementwise nodes that
// evaluate the chain tile by tile; only values read outside the chain are written to memory.
void elementwise_fusion(proto::Job& job, PassContext& context);

}  // namespace flow::graph
