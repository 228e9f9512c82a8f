#pragma once
// Training rewrite "optimizer_step": each optimizer's update of the parameters it trains, traced
// into the Job as update ops (Optimizer::trace_step). The scalars that change every step (the
// learning rate, bias corrections) are Job feeds, named here and fed before each run.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "graph/tracer.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"

namespace flow::graph::training {

// "_optimizer.<index>.": the prefix of optimizer `index`'s state in the Job and in
// nn::Graph::state_dict().
std::string optimizer_prefix(size_t index);

// Traces optimizer `index`'s update of `params`; `skip` (a bool 0-d tensor, or undefined) leaves
// the parameters and state as they were when true.
void trace_optimizer_step(optim::Optimizer& optimizer, size_t index, const TensorList& params, Tracer& tracer, int64_t zero_stage,
                          const Tensor& skip);

// The feeds of the next run: every optimizer's step scalars for the parameters it trains; then
// each scheduler steps.
std::map<std::string, Tensor> next_step_feeds(const std::vector<std::shared_ptr<optim::Optimizer>>& optimizers,
                                              const std::vector<std::shared_ptr<optim::LRScheduler>>& schedulers,
                                              const std::vector<TensorList>& trained_params);

}  // namespace flow::graph::training
