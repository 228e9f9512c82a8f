#include "optim/grad_scaler.h"

#include <charconv>
#include <cmath>

#include <glog/logging.h>

#include "core/grad_mode.h"
#include "core/ops/all.h"

namespace flow::amp {
namespace {

std::string exact(double value) {
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

double read_double(const StateDict& state, const std::string& key) {
  auto it = state.metadata().find(key);
  if (it == state.metadata().end()) fail("GradScaler.load_state_dict", "the state has no '", key, "'");
  double value = 0;
  const auto result = std::from_chars(it->second.data(), it->second.data() + it->second.size(), value);
  if (result.ec != std::errc() || result.ptr != it->second.data() + it->second.size()) {
    fail("GradScaler.load_state_dict", "'", key, "' is not a number: ", it->second);
  }
  return value;
}

}  // namespace

// t * 0 is 0 everywhere but where t is inf or NaN, so its sum is exactly 0 unless one is.
Tensor zero_or_nan(const Tensor& t) { return (t.to(kFloat32) * 0.0).sum(); }

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale_) {
  if (!(options_.init_scale_ > 0) || !std::isfinite(options_.init_scale_)) {
    fail("GradScaler", "init_scale must be a positive finite number, got ", options_.init_scale_);
  }
  if (!(options_.growth_factor_ > 1)) fail("GradScaler", "growth_factor must be > 1, got ", options_.growth_factor_);
  if (!(options_.backoff_factor_ > 0 && options_.backoff_factor_ < 1)) {
    fail("GradScaler", "backoff_factor must be in (0, 1), got ", options_.backoff_factor_);
  }
  if (options_.growth_interval_ <= 0) fail("GradScaler", "growth_interval must be positive, got ", options_.growth_interval_);
}

Tensor GradScaler::scale(const Tensor& loss) const { return options_.enabled_ ? loss * scale_ : loss; }

GradScaler::OptimizerState& GradScaler::state_of(const optim::Optimizer& optimizer) { return per_optimizer_[&optimizer]; }

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!options_.enabled_) return;
  OptimizerState& state = state_of(optimizer);
  if (state.unscaled) fail("GradScaler.unscale_", "unscale_() has already been called on this optimizer since the last update()");
  if (state.stepped) fail("GradScaler.unscale_", "unscale_() is being called after step()");
  const autograd::NoGradGuard no_grad;
  const double inverse = 1.0 / scale_;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params) {
      if (!p.grad().defined()) continue;
      Tensor grad = p.grad();
      grad.copy_(grad * inverse);
      if (!state.found_inf && zero_or_nan(grad).item<float>() != 0.0f) state.found_inf = true;
    }
  }
  state.unscaled = true;
}

bool GradScaler::step(optim::Optimizer& optimizer) {
  if (!options_.enabled_) {
    optimizer.step();
    return true;
  }
  if (state_of(optimizer).stepped) fail("GradScaler.step", "step() has already been called since the last update()");
  if (!state_of(optimizer).unscaled) unscale_(optimizer);
  OptimizerState& state = state_of(optimizer);
  state.stepped = true;
  if (state.found_inf) return false;
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled_) return;
  if (per_optimizer_.empty()) fail("GradScaler.update", "no inf checks were recorded prior to update(): call step() first");
  bool found_inf = false;
  for (const auto& [optimizer, state] : per_optimizer_) found_inf = found_inf || state.found_inf;
  if (found_inf) {
    scale_ *= options_.backoff_factor_;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == options_.growth_interval_) {
    scale_ *= options_.growth_factor_;
    growth_tracker_ = 0;
  }
  per_optimizer_.clear();
}

void GradScaler::set_progress(double scale, int64_t growth_tracker) {
  CHECK(scale > 0 && growth_tracker >= 0) << "scale " << scale << ", growth tracker " << growth_tracker;
  scale_ = scale;
  growth_tracker_ = growth_tracker;
}

StateDict GradScaler::state_dict() const {
  StateDict out;
  if (!options_.enabled_) return out;
  out.metadata()["scale"] = exact(scale_);
  out.metadata()["growth_factor"] = exact(options_.growth_factor_);
  out.metadata()["backoff_factor"] = exact(options_.backoff_factor_);
  out.metadata()["growth_interval"] = std::to_string(options_.growth_interval_);
  out.metadata()["growth_tracker"] = std::to_string(growth_tracker_);
  return out;
}

void GradScaler::load_state_dict(const StateDict& state) {
  if (!options_.enabled_) fail("GradScaler.load_state_dict", "called on a disabled GradScaler");
  if (state.metadata().empty()) fail("GradScaler.load_state_dict", "the state is empty: it was saved by a disabled GradScaler");
  scale_ = read_double(state, "scale");
  options_.growth_factor_ = read_double(state, "growth_factor");
  options_.backoff_factor_ = read_double(state, "backoff_factor");
  options_.growth_interval_ = static_cast<int64_t>(read_double(state, "growth_interval"));
  growth_tracker_ = static_cast<int64_t>(read_double(state, "growth_tracker"));
}

}  // namespace flow::amp
