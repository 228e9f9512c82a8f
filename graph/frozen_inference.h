#pragma once
// An inference plan with its weights frozen, as torch.jit.freeze does for TorchScript: the Job's
// variables become constants bound to the parameters' current values, what depends on them alone
// (the folded conv + batch-norm weights) is computed once, and CPU float32 convolutions, pooling,
// ReLU, residual adds and linears run on the layout pass (job/blocked_layout.h, oneflow_lite's)
// with their weights reordered and packed once. nn::Graph keeps a frozen plan only while every
// tensor it froze keeps its storage version (an in-place write, copy_, load_state_dict, an
// optimizer step bumps it) and the calling thread its kernel threads; otherwise it freezes again
// or runs the unfrozen plan (graph/graph.h).
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "graph/executor.h"
#include "job/blocked_layout.h"
#include "job/plan.h"

namespace flow::graph {

// Turns every variable node into a constant of the same name: its tensor becomes a fixed value.
void freeze_variables(proto::Job& job);

// The layout pass over a Job's op nodes (every node but inputs, variables, constants, feeds and
// outputs, in Job order), with the value ids it names values by.
struct JobLayouts {
  std::shared_ptr<const BlockedLayouts> layouts;
  std::vector<int> step_of;                       // by Job position: the node's step, -1 for none
  std::vector<std::vector<int>> inputs, outputs;  // by step: value ids
  std::vector<TensorMeta> metas;                  // by value id
  std::set<std::string> blocked_only;             // values needing no planned buffer
};

// Plans the layout pass over `job`. Its variables and constants (their tensors in `fixed`, by
// node name) are the weights: reordered and packed now, so the plan holds their values of now.
JobLayouts plan_job_layouts(const proto::Job& job, const std::map<std::string, Tensor>& fixed);

// The storage versions of the tensors of `fixed`, in its (name) order.
std::vector<uint64_t> storage_versions(const std::map<std::string, Tensor>& fixed);

class FrozenInference {
 public:
  // Why `job` (after the passes) may not run frozen, or empty when it may: an inference Job (no
  // in-place write of a variable or constant, no per-run feed, no collective or send/recv) with
  // variables, all its values and fixed tensors (`fixed`) on the CPU.
  static std::string refusal(const proto::Job& job, const std::map<std::string, Tensor>& fixed);
  // Freezes `job` on the current values of `fixed` (whose storage versions are `versions`), plans
  // it and makes its executor.
  FrozenInference(const proto::Job& job, std::map<std::string, Tensor> fixed, std::vector<uint64_t> versions);
  FrozenInference(const FrozenInference&) = delete;
  FrozenInference& operator=(const FrozenInference&) = delete;

  // Whether the tensors it froze have the storage versions they had (`versions`: storage_versions
  // of the same `fixed` now), and the calling thread the kernel threads the layout pass's
  // primitives were made for.
  bool fresh(const std::vector<uint64_t>& versions) const;
  Executor& executor() { return *executor_; }
  // How many of the frozen Job's ops run on blocked layouts.
  int64_t blocked_steps() const { return layouts_.layouts->blocked_steps(); }
  const proto::Job& job() const { return job_; }
  const Plan& plan() const { return plan_; }

 private:
  std::vector<uint64_t> versions_;
  int threads_ = 0;
  proto::Job job_;
  JobLayouts layouts_;
  Plan plan_;
  std::unique_ptr<Executor> executor_;
};

}  // namespace flow::graph
