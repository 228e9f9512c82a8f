#pragma once
// Job -> Job passes and the pass manager that runs them in order, optionally dumping the Job
// after each one (debug level 3, or the directory in FLOW_GRAPH_DUMP_DIR). Each pass notes what
// it did in a PassRecord, which nn::Graph::explain() reports.
#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "job/job.h"

namespace flow::graph {

struct NodeRef {
  std::string name;
  std::string op;
};

// A group of nodes one node now computes: an element-wise chain (with the linear or assign it
// absorbed), or a conv2d and the batch norm folded into it.
struct FusedGroup {
  NodeRef node;
  std::vector<NodeRef> members;  // in Job order
};

struct RemovedNode {
  NodeRef node;
  std::string reason;  // "dead", "duplicate of <node>", "copy of <value>"
};

// A clone that recomputes a checkpointed forward node for backward (activation checkpointing).
struct RecomputedNode {
  NodeRef node;
  std::string original;
};

// What one pass did to the Job. The pass manager fills the counts, time and node differences;
// the pass itself says why.
struct PassRecord {
  std::string pass;
  int64_t nodes_before = 0;
  int64_t nodes_after = 0;
  double seconds = 0;
  std::vector<std::string> removed;  // nodes of the Job before that the Job after lacks, in Job order
  std::vector<std::string> added;    // nodes of the Job after that the Job before lacked, in Job order
  std::vector<FusedGroup> fused;
  std::vector<NodeRef> folded;          // evaluated at compile time into constants (op before folding)
  std::vector<RemovedNode> eliminated;  // removed by dead-code or common-subexpression elimination
  std::vector<RemovedNode> bypassed;    // copies whose readers now read the source; DCE removes them
  std::vector<NodeRef> rewritten;       // op replaced in place (op after)
  std::vector<RecomputedNode> recomputed;
};

struct PassContext {
  // The eager tensors behind variable and constant nodes, by node name; constant folding adds
  // its results here.
  std::map<std::string, Tensor>& fixed;
  // Where the running pass notes what it did; the pass manager starts a fresh one per pass.
  PassRecord record = {};
};

using PassFn = std::function<void(proto::Job& job, PassContext& context)>;

class PassManager {
 public:
  PassManager& add(std::string name, PassFn pass);
  // Appends every pass of others, in its order.
  PassManager& add(const PassManager& others);
  // Puts a pass just before the pass named `before`, which must be there.
  PassManager& insert_before(const std::string& before, std::string name, PassFn pass);
  // Runs every pass in order and returns what each did. debug_level >= 1 logs each pass with the
  // node count it leaves; >= 3 (or FLOW_GRAPH_DUMP_DIR) dumps the Job text after each pass.
  std::vector<PassRecord> run(proto::Job& job, PassContext& context, int debug_level = 0, std::ostream* log = nullptr) const;
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
// computed by ops on the variables, and the batch norm disappears. Under AMP (the batch norm
// reading a float32 cast of a 16-bit conv on casts of the weights) the weights are folded in
// float32 and cast to the conv's dtype, and the cast of the result stays.
void conv_batch_norm_folding(proto::Job& job, PassContext& context);
// Lets the readers of a same-dtype, same-device copy read its source instead, when neither is
// ever written in place, the source is not a view's (possibly strided) output and the copy is
// not a graph output (e.g. the clone autograd makes of a leaf's first gradient); DCE then drops
// the copy.
void copy_elimination(proto::Job& job, PassContext& context);
// Update-with-cast, run after elementwise_fusion by nn::Graph (which keeps the copies fresh: before
// a run it casts again each parameter whose storage version moved): a float32 variable whose last
// in-place write is a fused update writing it whole (as every earlier write) and whose float16/bfloat16 casts are all read before that
// update gets a variable holding its rounded copy (attr "cast_of": the parameter's node), written
// by the update as a second destination and read instead of the casts, which are removed. Not in
// default_passes(): a Job run without nn::Graph would read a copy nobody refreshes after eager
// code changes the parameter.
void fuse_update_cast(proto::Job& job, PassContext& context);
// Run after fuse_update_cast by nn::Graph: a fused_elementwise_inplace node that reads the results
// of earlier in-place fused nodes of its shape (an optimizer's moment updates, AdamW's decay) takes
// them into its program when running them at its position in one pass computes the same values
// (nothing between them reads or writes what they write, nothing overwritten escapes); it writes
// all their destinations, so each tensor of the update is read and written once. An in-place
// fused node also takes in the element-wise producers (fused_elementwise of its layout, or one
// fusable op) whose results only it reads, when nothing writes their operands before it runs.
void merge_inplace_updates(proto::Job& job, PassContext& context);
// Replaces chains of element-wise nodes with one output shape by fused_elementwise nodes that
// evaluate the chain tile by tile; only values read outside the chain are written to memory.
void elementwise_fusion(proto::Job& job, PassContext& context);

}  // namespace flow::graph
