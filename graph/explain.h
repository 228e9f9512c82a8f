#pragma once
// nn::Graph::explain(), after torch._dynamo.explain: for every compiled plan, the ops traced,
// what each pass did to the Job (from the passes' own records), the memory the plan reuses and
// plans, the time of each compile phase, why the plan was compiled (the guards earlier plans
// failed), and whether it runs frozen for inference. It describes the Job and Plan the runtime
// executes; nothing is traced again.
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "graph/passes.h"
#include "graph/signature.h"
#include "job/job.h"
#include "job/plan.h"

namespace flow::graph {

// Filled while one plan compiles.
struct CompileLog {
  int64_t traced_nodes = 0;                   // every node of the traced Job
  std::map<std::string, int64_t> traced_ops;  // op type -> traced nodes of it (sources and outputs left out)
  std::vector<std::string> training_rewrites;  // applied while tracing, in their order (graph/training/rewrites.h)
  std::vector<PassRecord> passes;             // in pipeline order
  std::vector<std::string> guard_failures;    // per earlier plan, why this input signature fails its guards
  double trace_seconds = 0;
  double passes_seconds = 0;
  double plan_seconds = 0;
  double runtime_seconds = 0;  // starting the executor and its actors
};

// A planned buffer placed over memory that an earlier buffer, dead by then, used.
struct BufferReuse {
  std::string value;
  std::string reuses;  // the earlier buffer's value (the latest to die of those it overlaps)
  std::string device;
  int64_t nbytes = 0;
};

struct PlanExplanation {
  int64_t index = 0;  // compile order
  InputSignature signature;
  CompileLog log;
  double compile_seconds = 0;
  int64_t nodes_after_passes = 0;
  std::map<std::string, int64_t> ops_after_passes;  // op type -> nodes of it in the optimised Job
  int64_t planned_buffers = 0;
  std::map<std::string, int64_t> planned_bytes;  // per device: Plan::block_bytes
  int64_t bytes_without_reuse = 0;               // Plan::total_buffer_bytes
  std::vector<BufferReuse> reused;
  // Frozen inference (graph/frozen_inference.h): why the plan never runs frozen (empty when it
  // may), and, when the latest call that ran it ran it frozen, the frozen Job's ops, how many of
  // them run on blocked layouts, and its planned bytes per device.
  std::string freeze_refusal;
  bool ran_frozen = false;
  std::map<std::string, int64_t> frozen_ops;
  int64_t frozen_blocked_steps = 0;
  std::map<std::string, int64_t> frozen_planned_bytes;

  int64_t traced_op_count() const;
};

struct ExplainReport {
  std::string graph;  // the graph's name
  std::vector<PlanExplanation> plans;
};

// Op type -> nodes of it, sources and outputs left out.
std::map<std::string, int64_t> op_counts(const proto::Job& job);
// The buffers of the plan that reuse the memory of earlier ones, in Job order of definition.
std::vector<BufferReuse> reused_buffers(const Plan& plan);
PlanExplanation explain_plan(int64_t index, const InputSignature& signature, const CompileLog& log, const proto::Job& job, const Plan& plan,
                             double compile_seconds);

std::ostream& operator<<(std::ostream& out, const ExplainReport& report);

}  // namespace flow::graph
