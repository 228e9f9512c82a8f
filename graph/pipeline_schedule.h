#pragma once
// GPipe's schedule for a pipeline-parallel Job traced as micro-batches. build() is traced once per
// micro-batch, forward then backward, so in trace order a stage would wait for micro-batch k's
// gradient before computing micro-batch k+1's forward, and the stages would take turns. Moving
// every micro-batch's forward ahead of every backward (each group keeping its trace order) lets
// stage s compute micro-batch k+1 while stage s+1 computes micro-batch k; every rank applies the
// same rule to its part of the program, so the collectives keep one order on all ranks.
#include <set>
#include <string>
#include <vector>

#include "graph/job.h"

namespace flow::graph {

// micro_batch_starts: the Job position where each micro-batch's trace begins, then the position
// where the last one ends; gradient_nodes: the nodes autograd's backward created. Reorders the
// nodes in that range: sources first, then the forward nodes, then the gradient nodes. Returns
// false and leaves the Job as it is when that order would read a value before its producer, or
// when the range holds an in-place op (moving it could change what another node reads).
bool schedule_forwards_first(proto::Job& job, const std::vector<int>& micro_batch_starts, const std::set<std::string>& gradient_nodes);

}  // namespace flow::graph
