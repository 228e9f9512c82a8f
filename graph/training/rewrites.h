#pragma once
// nn::Graph's training rewrites (OneFlow's job_rewriter passes): what a training Graph adds to the
// step that build() traces, in one fixed order. Each lives in its own file of graph/training/;
// the Job passes (graph/passes.h) run after all of them, on the traced Job.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "graph/tracer.h"
#include "graph/training/loss_scaling.h"
#include "optim/optimizer.h"

namespace flow::graph::training {

struct TrainingRewrite {
  const char* name;
  const char* when;  // the setting that turns it on
  const char* what;
};

// In the order they apply:
//   amp                    build() traced under autocast
//   gradient_accumulation  build() on micro-batches; their gradients averaged
//   loss_scaling           backward from the loss scale; gradients unscaled; the scale updated
//   gradient_buckets       data-parallel gradients reduced per bucket (ZeRO-2: reduce-scattered)
//   gradient_clipping      each clipping param group's gradients scaled to its max norm
//   optimizer_step         each optimizer's update traced (ZeRO: on sharded state)
//   pipeline_schedule      the micro-batches reordered (GPipe or 1F1B)
// After backward they apply per optimizer in turn (average, buckets, unscale, clip, step), then
// the scale's update once.
const std::vector<TrainingRewrite>& training_rewrites();

// What the rewrites after build()'s backward need.
struct UpdateRewrites {
  const std::vector<std::shared_ptr<optim::Optimizer>>& optimizers;
  int64_t accumulation_steps = 1;
  int64_t zero_stage = 0;
  LossScaling* loss_scaling = nullptr;  // null: no loss scaling
  Tracer& tracer;
  const std::string& graph;  // the Graph's name, for errors
};

struct UpdateTrace {
  // Per optimizer, the parameters it updates in the Job (those with a traced gradient, or a
  // global one: a stage on other ranks still counts its steps).
  std::vector<TensorList> trained_params;
  // The rewrites that applied: gradient_accumulation, loss_scaling, gradient_buckets (when it
  // traced a collective), gradient_clipping (when a group clips), optimizer_step (when there is
  // an optimizer).
  std::vector<std::string> applied;
};
UpdateTrace trace_updates(const UpdateRewrites& rewrites);

// The names of `applied` (a set of rewrite names) in pipeline order.
std::vector<std::string> in_pipeline_order(const std::vector<std::string>& applied);

}  // namespace flow::graph::training
