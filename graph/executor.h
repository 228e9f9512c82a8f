#pragma once
// Runs a planned Job on the actor runtime: one actor per task, register slots holding the values
// of each piece, intermediate buffers preallocated in one memory block per device as the plan
// says.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graph/runtime.h"
#include "job/blocked_layout.h"
#include "job/plan.h"

namespace flow::graph {

struct JobLayouts;  // graph/frozen_inference.h

// What a piece needs that only the caller knows: the graph call's arguments and the per-run
// feeds (by key). Called by the input actor, in piece order, possibly while earlier pieces are
// still computing.
using PieceSource = std::function<void(int64_t piece, TensorList& inputs, std::map<std::string, Tensor>& feeds)>;

class Executor {
 public:
  // fixed: the eager tensors behind variable and constant nodes, by node name. layouts (kept
  // alive by the caller): the steps that run on blocked layouts, whose blocked-only values the
  // plan left unplanned; their blocked memory is one arena, as the compute section runs one
  // piece at a time.
  Executor(const proto::Job& job, const Plan& plan, std::map<std::string, Tensor> fixed, const JobLayouts* layouts = nullptr);
  // Runs `pieces` pieces and returns the graph outputs of each.
  std::vector<TensorList> run(int64_t pieces, const PieceSource& source);
  const std::vector<std::string>& thread_names() const { return runtime_->thread_names(); }

 private:
  struct InputRef {
    Tensor fixed;      // variable or constant, else undefined
    int task = -1;     // producing task
    int index = 0;     // position in that task's register
  };
  struct CompiledNode {
    const proto::Node* node = nullptr;
    const OpDef* op = nullptr;
    Attrs attrs;
    std::vector<TensorMeta> out_metas;
    std::vector<InputRef> inputs;
    TensorList planned_outputs;  // preallocated buffers, or empty to allocate
    int64_t random_numel = 0;    // random ops draw fresh counters on every run
    int64_t random_start = 0;    // of which this node's elements start here
    int layout_step = -1;        // the layout pass's step when it runs the node, else -1
  };

  void act(int task, int64_t piece, int slot, const std::vector<int>& input_slots);
  Tensor resolve(const InputRef& ref, int task, const std::vector<int>& input_slots) const;
  // Runs a node on blocked layouts; its result is undefined where only blocked steps read it.
  Tensor run_blocked(const CompiledNode& compiled, const TensorList& inputs);

  const proto::Job& job_;
  const Plan& plan_;
  std::map<std::string, Tensor> fixed_;
  std::vector<std::vector<CompiledNode>> compiled_;           // per task
  std::vector<std::vector<TensorList>> slots_;                // [task][slot] -> register values
  std::map<std::string, Tensor> blocks_;                      // planned memory, per device
  std::unique_ptr<ActorRuntime> runtime_;
  int inputs_task_ = -1;
  const JobLayouts* layouts_ = nullptr;
  BlockedArenaPtr layout_arena_;
  // By value id: the plain values blocked steps read and write, kept until the run ends (a step
  // may read a plain value given to an earlier one: the shallow-conv fold's pooling reads the
  // folded convolution's input).
  TensorList layout_values_;

  // Per run.
  const PieceSource* source_ = nullptr;
  std::vector<TensorList> results_;
  // By piece: the blocked steps do not accept its inputs (BlockedLayouts::accepts), so every node
  // runs through its op's kernel. Written by the input task before the piece's other tasks run.
  std::vector<char> plain_pieces_;
};

}  // namespace flow::graph
