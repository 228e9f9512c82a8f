#include "graph/training/rewrites.h"

#include <algorithm>

#include "core/ops/all.h"
#include "graph/training/gradient_accumulation.h"
#include "graph/training/gradient_buckets.h"
#include "graph/training/gradient_clipping.h"
#include "graph/training/optimizer_step.h"

namespace flow::graph::training {

const std::vector<TrainingRewrite>& training_rewrites() {
  static const std::vector<TrainingRewrite> rewrites = {
      {"amp", "config().enable_amp", "build() is traced under autocast(dtype): matrix products and convolutions in dtype"},
      {"gradient_accumulation", "config().set_gradient_accumulation_steps(n > 1)",
       "build() on n micro-batches of the inputs; their summed gradients divided by n"},
      {"loss_scaling", "set_grad_scaler",
       "backward from the loss scale; gradients unscaled, a non-finite one skips its optimizer; the scale backs off or grows"},
      {"gradient_buckets", "global data-parallel parameters", "partial-sum gradients reduced in one collective per placement and dtype"},
      {"gradient_clipping", "a param group's clip_grad_max_norm",
       "the group's averaged, reduced, unscaled gradients scaled as clip_grad_norm_ does, before the update"},
      {"optimizer_step", "add_optimizer", "each optimizer's update traced as update ops (ZeRO: on sharded state)"},
      {"pipeline_schedule", "parameters on several placements and n > 1 micro-batches", "micro-batches reordered: GPipe or 1F1B"},
  };
  return rewrites;
}

UpdateTrace trace_updates(const UpdateRewrites& rewrites) {
  UpdateTrace trace;
  std::vector<TensorList>& trained = trace.trained_params;
  trained.resize(rewrites.optimizers.size());
  Tensor all_zero_or_nan;  // NaN when any optimizer's unscaled gradients hold an inf or NaN
  bool bucketed = false, clipped = false;
  for (size_t i = 0; i < rewrites.optimizers.size(); ++i) {
    for (auto& group : rewrites.optimizers[i]->param_groups()) {
      for (auto& p : group.params) {
        // A global gradient without a piece here belongs to a stage on other ranks: its update
        // records nothing on this rank, but its step count advances everywhere alike.
        if (p.grad().defined() && (is_traced(p.grad()) || p.grad().is_global())) trained[i].push_back(p);
      }
    }
    const TensorList& params = trained[i];
    average_accumulated_gradients(params, rewrites.accumulation_steps);
    bucketed = reduce_gradients_in_buckets(params, rewrites.zero_stage) > 0 || bucketed;
    Tensor skip;
    if (rewrites.loss_scaling) {
      if (const Tensor zero_or_nan = rewrites.loss_scaling->unscale(params); zero_or_nan.defined()) {
        skip = ne(zero_or_nan, 0.0);
        all_zero_or_nan = all_zero_or_nan.defined() ? all_zero_or_nan + zero_or_nan : zero_or_nan;
      }
    }
    clipped = clip_gradients(*rewrites.optimizers[i], params, rewrites.graph) || clipped;
    trace_optimizer_step(*rewrites.optimizers[i], i, params, rewrites.tracer, rewrites.zero_stage, skip);
  }
  if (all_zero_or_nan.defined()) rewrites.loss_scaling->update(ne(all_zero_or_nan, 0.0));
  if (rewrites.accumulation_steps > 1) trace.applied.emplace_back("gradient_accumulation");
  if (rewrites.loss_scaling) trace.applied.emplace_back("loss_scaling");
  if (bucketed) trace.applied.emplace_back("gradient_buckets");
  if (clipped) trace.applied.emplace_back("gradient_clipping");
  if (!rewrites.optimizers.empty()) trace.applied.emplace_back("optimizer_step");
  return trace;
}

std::vector<std::string> in_pipeline_order(const std::vector<std::string>& applied) {
  std::vector<std::string> ordered;
  for (const TrainingRewrite& rewrite : training_rewrites()) {
    if (std::find(applied.begin(), applied.end(), rewrite.name) != applied.end()) ordered.emplace_back(rewrite.name);
  }
  return ordered;
}

}  // namespace flow::graph::training
