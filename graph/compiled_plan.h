#pragma once
// nn::Graph's compiled plans, for the files that implement the Graph (graph.cpp, graph_print.cpp,
// graph_state.cpp): what one trace gave and what one input signature compiled to.
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "graph/executor.h"
#include "graph/frozen_inference.h"
#include "graph/graph.h"

namespace flow::nn {

// What tracing saw of one module call: its input and output metas.
struct Graph::ModuleCall {
  TensorMeta input;
  TensorMeta output;
  bool has_output = false;
};

// What one trace of build() gave.
struct Graph::Traced {
  graph::proto::Job job;
  std::map<std::string, Tensor> fixed;  // the eager tensors behind variable and constant nodes
  std::vector<graph::InputGuard> output_layouts;  // each output's meta, and placement and sbp if global
  std::vector<TensorList> trained_params;  // per optimizer: parameters updated in the graph
  std::vector<std::string> training_rewrites;  // those applied, in pipeline order
  std::set<std::string> gradient_nodes;        // the nodes backward made (Tracer::gradient_nodes)
  std::map<const Module*, ModuleCall> module_calls;
};

// One input signature's compilation. The executor refers to the Job and plan, so a CompiledPlan
// stays where it was made (plans_ holds it by pointer).
struct Graph::CompiledPlan {
  graph::InputSignature signature;
  std::vector<TensorMeta> input_metas;
  Traced traced;
  std::unique_ptr<graph::Plan> plan;
  std::unique_ptr<graph::Executor> executor;
  double compile_seconds = 0;
  graph::CompileLog log;
  // The rounded parameter copies fuse_update_cast made, each with its parameter's storage version
  // when the copy last matched it (the Graph's own updates write both and bump the version).
  struct CastCopy {
    Tensor parameter;
    Tensor copy;
    uint64_t version = 0;
  };
  std::vector<CastCopy> cast_copies;
  // Why the plan never runs frozen (graph/frozen_inference.h), or empty when it may: `executor` is
  // then made only for a call that runs unfrozen. The storage versions of the variables' and
  // constants' tensors at the previous call (or compile) decide whether a call freezes.
  std::string freeze_refusal;
  std::unique_ptr<graph::FrozenInference> frozen;
  std::vector<uint64_t> previous_versions;
  bool ran_frozen = false;
};

}  // namespace flow::nn
