#include "graph/training/loss_scaling.h"

#include <tuple>

#include "core/error.h"
#include "core/grad_mode.h"
#include "core/ops/all.h"

namespace flow::graph::training {

LossScaling::LossScaling(std::shared_ptr<amp::GradScaler> scaler) : scaler_(std::move(scaler)) {
  if (!scaler_) fail("graph", "set_grad_scaler got a null GradScaler");
  // The growth tracker is a float32 variable: counts up to 2^24 are exact.
  if (scaler_->options().growth_interval_ > (int64_t{1} << 24)) {
    fail("graph", "set_grad_scaler: growth_interval ", scaler_->options().growth_interval_, " is above the 2^24 a graph counts to");
  }
}

void LossScaling::make_variables(const std::vector<std::shared_ptr<optim::Optimizer>>& optimizers, const std::string& graph) {
  if (optimizers.empty()) fail("graph", graph, ": set_grad_scaler needs add_optimizer: the scaler scales a training graph's loss");
  for (const auto& optimizer : optimizers) {
    for (const auto& group : optimizer->param_groups()) {
      for (const auto& p : group.params) {
        if (p.is_global()) fail("graph", graph, ": set_grad_scaler does not support global parameters yet");
      }
    }
  }
  if (scale_.defined()) return;
  std::tie(scale_, growth_tracker_) = values(optimizers.front()->param_groups().front().params.front().device());
}

std::pair<Tensor, Tensor> LossScaling::values(const Device& device) const {
  const TensorOptions options = TensorOptions(kFloat32).device(device);
  return {scalar_tensor(scaler_->get_scale(), options), scalar_tensor(static_cast<double>(scaler_->growth_tracker()), options)};
}

Tensor LossScaling::unscale(const TensorList& params) const {
  autograd::NoGradGuard no_grad;
  const Tensor inverse = 1.0 / scale_;
  Tensor sum;
  for (Tensor p : params) {
    const Tensor grad = p.grad() * inverse.to(p.grad().dtype());
    p.set_grad(grad);
    const Tensor term = amp::zero_or_nan(grad);
    sum = sum.defined() ? sum + term : term;
  }
  return sum;
}

void LossScaling::update(const Tensor& found_inf) {
  autograd::NoGradGuard no_grad;
  const amp::GradScalerOptions& options = scaler_->options();
  const Tensor counted = growth_tracker_ + 1.0;
  const Tensor grow = ge(counted, static_cast<double>(options.growth_interval_));
  const Tensor scale = where(found_inf, scale_ * options.backoff_factor_, where(grow, scale_ * options.growth_factor_, scale_));
  const Tensor tracker = where(found_inf, Scalar(0.0), where(grow, Scalar(0.0), counted));
  scale_.copy_(scale);
  growth_tracker_.copy_(tracker);
}

void LossScaling::publish() const {
  if (scale_.defined()) scaler_->set_progress(scale_.item<float>(), static_cast<int64_t>(growth_tracker_.item<float>()));
}

void LossScaling::reload() {
  if (!scale_.defined()) return;
  autograd::NoGradGuard no_grad;
  const auto [scale, tracker] = values(scale_.device());
  scale_.copy_(scale);
  growth_tracker_.copy_(tracker);
}

}  // namespace flow::graph::training
