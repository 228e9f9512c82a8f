#pragma once
// Training rewrite "loss_scaling": dynamic loss scaling inside the Job (nn::Graph::
// set_grad_scaler, OneFlow's nn.Graph.set_grad_scaler). build()'s loss.backward() starts from the
// scale instead of one; each optimizer's gradients are divided by it (an optimizer whose quotients
// hold an inf or NaN skips its update); the scale backs off after such a step and grows after
// growth_interval clean steps in a row (amp::GradScaler's rules). The scale and growth tracker are
// float32 Job variables; after each run the scaler holds their values.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"

namespace flow::graph::training {

// The prefix of the scaler's Job variables and state_dict entries.
inline const std::string kGradScalerPrefix = "_grad_scaler.";

class LossScaling {
 public:
  // Throws flow::Error for a null scaler or a growth_interval above the 2^24 a float32 counts.
  explicit LossScaling(std::shared_ptr<amp::GradScaler> scaler);

  bool enabled() const { return scaler_->is_enabled(); }
  amp::GradScaler& scaler() { return *scaler_; }
  const amp::GradScaler& scaler() const { return *scaler_; }

  // The scale and growth tracker variables, made once from the scaler's state on the device of
  // the first optimizer's first parameter. Throws flow::Error naming `graph` without optimizers or
  // with global parameters (not supported yet).
  void make_variables(const std::vector<std::shared_ptr<optim::Optimizer>>& optimizers, const std::string& graph);
  bool has_variables() const { return scale_.defined(); }
  const Tensor& scale() const { return scale_; }
  const Tensor& growth_tracker() const { return growth_tracker_; }

  // Divides the gradients of params by the scale (they become the quotients) and returns the sum
  // of every quotient times 0 (a float32 0-d tensor): NaN exactly when a quotient is not finite,
  // else 0. Undefined without gradients.
  Tensor unscale(const TensorList& params) const;
  // Traces the scale's backoff (found_inf) or growth and the growth tracker's count.
  void update(const Tensor& found_inf);
  // After a run: the scaler takes the Job's scale and growth tracker.
  void publish() const;
  // After the scaler's state was loaded: the Job's variables take it (written in place).
  void reload();

 private:
  // The scaler's scale and growth tracker as float32 0-d tensors on `device`.
  std::pair<Tensor, Tensor> values(const Device& device) const;

  std::shared_ptr<amp::GradScaler> scaler_;
  Tensor scale_, growth_tracker_;
};

}  // namespace flow::graph::training
