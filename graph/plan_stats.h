#pragma once
// What one step of a compiled plan costs this rank: the bytes its collectives send and the
// memory it holds. Read from the plan itself (the Job each rank runs and its memory plan), so it
// measures exactly what the runtime would do; on meta tensors in a simulated world
// (distributed/simulated_process_group.h) it measures plans of any size at any scale without
// running them (flow_plan_stats).
#include <cstdint>
#include <map>
#include <string>

#include "job/job.h"
#include "job/plan.h"

namespace flow::graph {

// The collectives of one kind in a step.
struct CollectiveCost {
  int64_t calls = 0;
  int64_t tensor_bytes = 0;  // the local tensors' sizes, summed (all_gather: its output)
  double sent_bytes = 0;     // what this rank sends (see plan_stats)
};

struct PlanStats {
  int64_t ranks = 1;                                    // the world the plan was compiled for
  std::map<std::string, CollectiveCost> collectives;    // by op: "all_reduce", "all_gather", ...
  double sent_bytes = 0;                                // every collective, per step
  int64_t parameter_bytes = 0;        // this rank's pieces of the modules' parameters and buffers
  int64_t optimizer_state_bytes = 0;  // this rank's pieces of the optimizer state
  int64_t input_bytes = 0;            // this rank's pieces of the step's inputs
  int64_t planned_bytes = 0;          // the memory plan's blocks: activations, gradients, temporaries
  int64_t total_bytes() const { return parameter_bytes + optimizer_state_bytes + input_bytes + planned_bytes; }
};

// Bytes sent per rank follow the ring algorithms of OneFlow's boxing cost model, for a local
// tensor of B bytes among n members: all_reduce 2(n-1)/n B, all_gather (n-1)/n B of its output,
// reduce_scatter (n-1)/n B of its input, all_to_all (n-1)/n B of its input, broadcast
// (n-1)/n B (a pipelined chain: every member but the last forwards the tensor once, averaged),
// send B (a recv sends nothing).
// world_size resolves collectives over every rank (empty `ranks`).
PlanStats plan_stats(const proto::Job& job, const Plan& plan, int64_t world_size);

// A table of the stats with human units (KiB, MiB, GiB).
std::string format_plan_stats(const PlanStats& stats);
// "1.50 GiB"
std::string human_bytes(double bytes);

}  // namespace flow::graph
