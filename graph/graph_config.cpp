#include "graph/graph_config.h"

#include "core/autocast.h"
#include "core/error.h"

namespace flow::nn {

GraphConfig& GraphConfig::set_gradient_accumulation_steps(int64_t steps) {
  if (steps < 1) fail("graph", "gradient accumulation steps must be at least 1, got ", steps);
  gradient_accumulation_steps_ = steps;
  return *this;
}

GraphConfig& GraphConfig::set_pipeline_schedule(PipelineSchedule schedule) {
  pipeline_schedule_ = schedule;
  return *this;
}

GraphConfig& GraphConfig::enable_amp(bool on, DType dtype) {
  check_autocast_dtype("graph.enable_amp", dtype);
  amp_enabled_ = on;
  amp_dtype_ = dtype;
  return *this;
}

GraphConfig& GraphConfig::set_activation_checkpointing(const std::string& module_path, bool on) {
  if (module_path.empty()) fail("graph.set_activation_checkpointing", "the module path is empty; name a module such as 'model.h.0'");
  if (on) {
    checkpointed_modules_.insert(module_path);
  } else {
    checkpointed_modules_.erase(module_path);
  }
  return *this;
}

GraphConfig& GraphConfig::enable_inference_freezing(bool on) {
  inference_freezing_enabled_ = on;
  return *this;
}

GraphConfig& GraphConfig::add_pass(std::string name, graph::PassFn pass) {
  if (name.empty()) fail("graph.add_pass", "a pass needs a name (explain() and the Job dumps show it)");
  if (!pass) fail("graph.add_pass", "pass ", name, " is empty");
  user_passes_.emplace_back(std::move(name), std::move(pass));
  return *this;
}

GraphConfig& GraphConfig::enable_zero(int64_t stage) {
  if (stage < 0 || stage > 2) fail("graph", "ZeRO stage must be 0 (off), 1 or 2, got ", stage);
  zero_stage_ = stage;
  return *this;
}

GraphConfig& GraphConfig::set_cache_limit(int64_t limit) {
  if (limit < 1) fail("graph", "cache limit must be at least 1, got ", limit);
  cache_limit_ = limit;
  return *this;
}

}  // namespace flow::nn
