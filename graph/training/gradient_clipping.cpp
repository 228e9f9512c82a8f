#include "graph/training/gradient_clipping.h"

#include <set>

#include "core/error.h"
#include "core/grad_mode.h"
#include "core/ops/all.h"
#include "nn/utils/clip_grad.h"

namespace flow::graph::training {

bool clip_gradients(const optim::Optimizer& optimizer, const TensorList& params, const std::string& graph) {
  std::set<TensorImpl*> traced;
  for (const Tensor& p : params) traced.insert(p.impl());
  bool clipped = false;
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const optim::ParamGroup& group = groups[g];
    if (!group.clip_grad_max_norm) continue;
    const double max_norm = *group.clip_grad_max_norm, norm_type = group.clip_grad_norm_type;
    if (!(max_norm >= 0) || !(norm_type > 0)) {
      fail("graph", graph, ": ", optimizer.name(), " param group ", g,
           ": clip_grad_max_norm must be non-negative and clip_grad_norm_type positive or inf, got ", max_norm, " and ", norm_type);
    }
    TensorList clipped_params, grads;
    for (const Tensor& p : group.params) {
      if (!traced.count(p.impl())) continue;
      clipped_params.push_back(p);
      grads.push_back(p.grad());
    }
    if (grads.empty()) continue;
    for (const Tensor& grad : grads) {
      if (grad.is_global() && !(grad.placement() == grads[0].placement())) {
        fail("graph", graph, ": ", optimizer.name(), " param group ", g, ": gradient clipping needs the group's parameters on one placement, got ",
             grads[0].placement().str(), " and ", grad.placement().str());
      }
    }
    autograd::NoGradGuard no_grad;
    const Tensor total = nn::utils::get_total_norm(grads, norm_type);
    // clip_grads_with_norm_'s coefficient. The scaled gradients are new values, as the averaged
    // and unscaled ones are, not in-place writes, which the Job passes leave alone.
    const Tensor coef = clamp(max_norm / (total + 1e-6), std::nullopt, Scalar(1.0));
    for (Tensor p : clipped_params) p.set_grad(p.grad() * coef.to(p.grad().dtype()));
    clipped = true;
  }
  return clipped;
}

}  // namespace flow::graph::training
