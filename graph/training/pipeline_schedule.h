#pragma once
// Training rewrite "pipeline_schedule": the order of a pipeline-parallel Job traced as
// micro-batches (parameters on several placements, gradient accumulation > 1). build() is traced once per
// micro-batch, forward then backward, so in trace order a stage would wait for micro-batch k's
// gradient before computing micro-batch k+1's forward, and the stages would take turns.
//
// - GPipe: every micro-batch's forward ahead of every backward (each group in trace order), so
//   stage s computes micro-batch k+1 while stage s+1 computes micro-batch k; every rank applies
//   the same rule to its part of the program, so collectives keep one order on all ranks. All
//   micro-batches' activations are alive at once.
// - 1F1B (PipeDream-flush, Megatron's default): stage s of S runs S-1-s warm-up forwards, then
//   alternates one forward and one backward, then the remaining backwards, so at most S-s
//   micro-batches' activations are alive on stage s. Each stage has its own order: the stages
//   may only talk point to point (send/recv, matched per peer in order), never by a collective.
#include <cstdint>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "graph/graph_config.h"
#include "job/job.h"

namespace flow::graph {

// micro_batch_starts: the Job position where each micro-batch's trace begins, then the position
// where the last one ends; gradient_nodes: the nodes autograd's backward created. Reorders the
// nodes in that range: sources first, then the forward nodes, then the gradient nodes. Returns
// false and leaves the Job as it is when that order would read a value before its producer, or
// when the range holds an in-place op (moving it could change what another node reads).
bool schedule_forwards_first(proto::Job& job, const std::vector<int>& micro_batch_starts, const std::set<std::string>& gradient_nodes);

// 1F1B with `warmup_forwards` forwards before the first backward (S-1-s on stage s of S). The
// same refusals as above, and also when the range holds a collective other than send/recv.
bool schedule_one_forward_one_backward(proto::Job& job, const std::vector<int>& micro_batch_starts,
                                       const std::set<std::string>& gradient_nodes, int64_t warmup_forwards);

namespace training {

// The rewrite: when the model's parameters (`params`, in order) live on more than one placement
// (the stages) and the Job holds more than one micro-batch, reorders it by `schedule` (1F1B needs
// this rank in exactly one stage and no collective among the micro-batches, else GPipe; GPipe
// falls back to trace order when it would break a dependency). debug_level >= 1 logs the choice.
// Returns whether it applied (several stages, several micro-batches).
bool schedule_pipeline(proto::Job& job, const std::vector<int>& micro_batch_starts, const std::set<std::string>& gradient_nodes,
                       const TensorList& params, nn::PipelineSchedule schedule, const std::string& graph, int debug_level,
                       std::ostream& log);

}  // namespace training
}  // namespace flow::graph
