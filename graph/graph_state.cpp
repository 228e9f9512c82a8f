// nn::Graph's state: modules, optimizers (with their schedulers' epochs), the grad scaler and the
// train step, so training resumes exactly.
#include "core/grad_mode.h"
#include "graph/graph.h"
#include "graph/training/loss_scaling.h"
#include "graph/training/optimizer_step.h"

namespace flow::nn {

using graph::training::kGradScalerPrefix;
using graph::training::optimizer_prefix;

StateDict Graph::state_dict() const {
  StateDict out;
  for (const auto& [prefix, module] : modules_) {
    for (const auto& [key, t] : module->state_dict()) out.insert(prefix + "." + key, t);
  }
  for (size_t i = 0; i < optimizers_.size(); ++i) {
    const StateDict state = optimizers_[i]->state_dict();
    for (const auto& [key, t] : state) out.insert(optimizer_prefix(i) + key, t);
    for (const auto& [key, value] : state.metadata()) out.metadata()[optimizer_prefix(i) + key] = value;
    if (schedulers_[i]) out.metadata()[optimizer_prefix(i) + "lr_scheduler.last_epoch"] = std::to_string(schedulers_[i]->last_epoch());
  }
  if (loss_scaling_ && loss_scaling_->enabled()) {
    const StateDict scaler_state = loss_scaling_->scaler().state_dict();
    for (const auto& [key, value] : scaler_state.metadata()) out.metadata()[kGradScalerPrefix + key] = value;
  }
  out.metadata()["train_step"] = std::to_string(train_step_);
  return out;
}

void Graph::load_state_dict(const StateDict& state, bool strict) {
  for (const auto& [prefix, module] : modules_) {
    StateDict sub;
    for (const auto& [key, t] : state) {
      if (key.rfind(prefix + ".", 0) == 0) sub.insert(key.substr(prefix.size() + 1), t);
    }
    module->load_state_dict(sub, strict);
  }
  for (size_t i = 0; i < optimizers_.size(); ++i) {
    const std::string prefix = optimizer_prefix(i);
    StateDict sub;
    for (const auto& [key, t] : state) {
      if (key.rfind(prefix, 0) == 0) sub.insert(key.substr(prefix.size()), t);
    }
    for (const auto& [key, value] : state.metadata()) {
      if (key.rfind(prefix, 0) == 0) sub.metadata()[key.substr(prefix.size())] = value;
    }
    optimizers_[i]->load_state_dict(sub);
    auto epoch = sub.metadata().find("lr_scheduler.last_epoch");
    if (schedulers_[i] && epoch != sub.metadata().end()) schedulers_[i]->set_last_epoch(std::stoll(epoch->second));
  }
  if (loss_scaling_ && loss_scaling_->enabled()) {
    StateDict scaler_state;
    for (const auto& [key, value] : state.metadata()) {
      if (key.rfind(kGradScalerPrefix, 0) == 0) scaler_state.metadata()[key.substr(kGradScalerPrefix.size())] = value;
    }
    if (!scaler_state.metadata().empty()) {
      loss_scaling_->scaler().load_state_dict(scaler_state);
      loss_scaling_->reload();
    } else if (strict) {
      fail("graph", name_, ".load_state_dict: the state has no grad scaler state (_grad_scaler.*) and the graph has a grad scaler");
    }
  }
  auto step = state.metadata().find("train_step");
  if (step != state.metadata().end()) train_step_ = std::stoll(step->second);
}

}  // namespace flow::nn
