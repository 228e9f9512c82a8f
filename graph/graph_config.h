#pragma once
// nn::GraphConfig: how an nn::Graph traces and compiles (training, ZeRO, gradient accumulation,
// the pipeline schedule, user passes, AMP, activation checkpointing, frozen inference, the plan
// cache limit).
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "graph/passes.h"

namespace flow::nn {

// How a pipeline-parallel Graph orders its micro-batches (graph/training/pipeline_schedule.h), as
// torch.distributed.pipelining's ScheduleGPipe and Schedule1F1B.
enum class PipelineSchedule { kGPipe, k1F1B };

class GraphConfig {
 public:
  // Set by add_optimizer.
  bool training() const { return training_; }
  // The most input signatures the graph compiles a plan for (default 8); a call with one more
  // is a flow::Error naming the signatures seen. Each plan holds its own Job, runtime and
  // planned memory block, so the limit also bounds memory.
  GraphConfig& set_cache_limit(int64_t limit);
  int64_t cache_limit() const { return cache_limit_; }
  // ZeRO (OneFlow's config.enable_zero): the optimizer state of data-parallel parameters
  // (global, broadcast on a 1-D placement) is split along dim 0 over their ranks, each rank
  // updates its rows and all-gathers the parameter; stage 2 also reduce-scatters the gradients
  // instead of all-reducing them. 0 turns it off. Set before the first call.
  GraphConfig& enable_zero(int64_t stage = 1);
  int64_t zero_stage() const { return zero_stage_; }
  // Each call's inputs are split along dim 0 into `steps` micro-batches; build() runs on each
  // (traced one after another into the Job), their gradients are averaged and the optimizer
  // updates once, so a call equals one step on the whole batch (for mean-reduced losses). 0-d
  // outputs (losses) are averaged over the micro-batches, others concatenated along dim 0. With
  // modules on different placements this is pipeline parallelism. Set before the first call.
  GraphConfig& set_gradient_accumulation_steps(int64_t steps);
  int64_t gradient_accumulation_steps() const { return gradient_accumulation_steps_; }
  // The micro-batch order of a pipeline (parameters on several placements, gradient
  // accumulation > 1). kGPipe (default): all forwards, then all backwards. k1F1B: stage s of S
  // (stages numbered by the order of the model's parameters) runs S-1-s forwards, then one
  // forward and one backward in turn, holding at most S-s micro-batches' activations; it falls
  // back to GPipe, logged at debug(1), where stages share a collective inside the micro-batches or
  // a rank is in more than one stage. Set before the first call.
  GraphConfig& set_pipeline_schedule(PipelineSchedule schedule);
  PipelineSchedule pipeline_schedule() const { return pipeline_schedule_; }
  // A user pass (Job -> Job, graph/passes.h; fx::graph_pass writes one with the fx API), run on
  // every traced Job before the default pipeline, in the order added, so the default passes
  // (DCE, fusion) clean up after it. explain() reports it like the built-in passes. Plans
  // compiled after it is added run it.
  GraphConfig& add_pass(std::string name, graph::PassFn pass);
  // Automatic mixed precision (OneFlow's config.enable_amp): build() is traced under
  // flow::autocast(dtype) (core/autocast.h), so the Job casts parameters and activations for
  // matrix products and convolutions to `dtype` and back to float32 where the policy needs it,
  // the gradients of float32 parameters stay float32, and the optimizer updates float32 master
  // weights. dtype is bfloat16 or float16. Set before the first call.
  GraphConfig& enable_amp(bool on = true, DType dtype = kBFloat16);
  bool amp_enabled() const { return amp_enabled_; }
  // Activation checkpointing of one module (OneFlow's
  // graph.block(module).config().activation_checkpointing = True), named by its path in the Graph:
  // the name it was registered under, then its path in named_modules() ("model.h.0"), which is
  // also the scope of the Job nodes its forward makes. The forward values computed inside it that
  // backward reads are recomputed just before backward instead of kept (the Job pass
  // "activation_checkpointing", graph/training/activation_checkpointing.h): less planned memory
  // for more compute, same results. A path naming no module is a flow::Error at compile time; on
  // a graph without backward it changes nothing. on=false takes the module off again. Set before
  // the first call.
  GraphConfig& set_activation_checkpointing(const std::string& module_path, bool on = true);
  const std::set<std::string>& activation_checkpointing() const { return checkpointed_modules_; }
  DType amp_dtype() const { return amp_dtype_; }
  // Frozen inference (torch.jit.freeze's idea; graph/frozen_inference.h), on by default: a plan
  // of a graph without optimizer, on CPU, whose Job writes no parameter or buffer, runs on a copy
  // of its Job with the parameters frozen into constants (the folded conv + batch-norm weights
  // computed once) and its convolutions, pooling and linears on oneDNN's blocked layouts with
  // weights reordered once. It is frozen at its first call and again at a call whose parameters
  // and buffers kept their storage versions since the previous call (or the calling thread's
  // kernel threads changed); a call whose parameters changed since the previous call (eager
  // training between inference calls, load_state_dict, copy_) runs the unfrozen plan, so weights
  // changing before every call are never frozen in vain. Writes through data_ptr() are not seen.
  GraphConfig& enable_inference_freezing(bool on = true);
  bool inference_freezing_enabled() const { return inference_freezing_enabled_; }
  const std::vector<std::pair<std::string, graph::PassFn>>& user_passes() const { return user_passes_; }

 private:
  friend class Graph;
  bool training_ = false;
  int64_t cache_limit_ = 8;
  int64_t zero_stage_ = 0;
  int64_t gradient_accumulation_steps_ = 1;
  PipelineSchedule pipeline_schedule_ = PipelineSchedule::kGPipe;
  bool amp_enabled_ = false;
  DType amp_dtype_ = kBFloat16;
  bool inference_freezing_enabled_ = true;
  std::set<std::string> checkpointed_modules_;
  std::vector<std::pair<std::string, graph::PassFn>> user_passes_;
};

}  // namespace flow::nn
