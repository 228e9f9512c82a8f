#pragma once
// Optimizers. Each update is written in functional ops over (param, grad, state), run without
// recording gradients, so the Graph compiler can later emit the same update as ops.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/serialization.h"
#include "core/tensor.h"

namespace flow::optim {

// A group of parameters sharing hyper-parameters (lr, momentum, ...), as in PyTorch.
struct ParamGroup {
  TensorList params;
  std::map<std::string, double> options;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Applies one update to every parameter that has a gradient.
  virtual void step() = 0;
  // Resets gradients (to undefined, or to zeros with set_to_none=false).
  void zero_grad(bool set_to_none = true);
  // New group; hyper-parameters not given take the optimizer's defaults.
  void add_param_group(const TensorList& params, std::map<std::string, double> options = {});
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // Hyper-parameters of every group and per-parameter state ("state.<index>.<name>", indices
  // counting parameters across groups in order), so training resumes exactly.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 protected:
  Optimizer(const TensorList& params, std::map<std::string, double> defaults, std::string name);
  // Calls update(options, param) for every parameter that has a gradient, without recording
  // gradients: the loop every step() shares.
  void for_each_update(const std::function<void(const std::map<std::string, double>&, Tensor&)>& update);
  // Per-parameter state tensors (momentum buffers, moments) and step counts.
  std::map<std::string, Tensor>& state_of(const Tensor& param);
  int64_t& step_of(const Tensor& param);

 private:
  std::string name_;
  std::map<std::string, double> defaults_;
  std::vector<ParamGroup> groups_;
  std::map<TensorImpl*, std::map<std::string, Tensor>> state_;
  std::map<TensorImpl*, int64_t> steps_;
};

struct SGDOptions {
  explicit SGDOptions(double lr) : lr_(lr) {}
  SGDOptions& momentum(double v) { momentum_ = v; return *this; }
  SGDOptions& dampening(double v) { dampening_ = v; return *this; }
  SGDOptions& weight_decay(double v) { weight_decay_ = v; return *this; }
  SGDOptions& nesterov(bool v) { nesterov_ = v; return *this; }
  double lr_, momentum_ = 0, dampening_ = 0, weight_decay_ = 0;
  bool nesterov_ = false;
};

class SGD : public Optimizer {
 public:
  SGD(const TensorList& params, const SGDOptions& options);
  void step() override;
};

struct AdamOptions {
  explicit AdamOptions(double lr = 1e-3) : lr_(lr) {}
  AdamOptions& betas(double beta1, double beta2) { beta1_ = beta1; beta2_ = beta2; return *this; }
  AdamOptions& eps(double v) { eps_ = v; return *this; }
  AdamOptions& weight_decay(double v) { weight_decay_ = v; return *this; }
  double lr_, beta1_ = 0.9, beta2_ = 0.999, eps_ = 1e-8, weight_decay_ = 0;
};

// Adam: weight decay added to the gradient (L2), like torch.optim.Adam.
class Adam : public Optimizer {
 public:
  Adam(const TensorList& params, const AdamOptions& options);
  void step() override;

 protected:
  Adam(const TensorList& params, const AdamOptions& options, std::string name, bool decoupled);

 private:
  bool decoupled_weight_decay_;
};

// AdamW: decoupled weight decay (p -= lr * wd * p), default weight_decay 0.01 like PyTorch.
class AdamW : public Adam {
 public:
  AdamW(const TensorList& params, const AdamOptions& options = AdamOptions().weight_decay(1e-2));
};

struct RMSpropOptions {
  explicit RMSpropOptions(double lr = 1e-2) : lr_(lr) {}
  RMSpropOptions& alpha(double v) { alpha_ = v; return *this; }
  RMSpropOptions& eps(double v) { eps_ = v; return *this; }
  RMSpropOptions& weight_decay(double v) { weight_decay_ = v; return *this; }
  RMSpropOptions& momentum(double v) { momentum_ = v; return *this; }
  RMSpropOptions& centered(bool v) { centered_ = v; return *this; }
  double lr_, alpha_ = 0.99, eps_ = 1e-8, weight_decay_ = 0, momentum_ = 0;
  bool centered_ = false;
};

class RMSprop : public Optimizer {
 public:
  RMSprop(const TensorList& params, const RMSpropOptions& options);
  void step() override;
};

struct AdagradOptions {
  explicit AdagradOptions(double lr = 1e-2) : lr_(lr) {}
  AdagradOptions& lr_decay(double v) { lr_decay_ = v; return *this; }
  AdagradOptions& weight_decay(double v) { weight_decay_ = v; return *this; }
  AdagradOptions& initial_accumulator_value(double v) { initial_accumulator_value_ = v; return *this; }
  AdagradOptions& eps(double v) { eps_ = v; return *this; }
  double lr_, lr_decay_ = 0, weight_decay_ = 0, initial_accumulator_value_ = 0, eps_ = 1e-10;
};

class Adagrad : public Optimizer {
 public:
  Adagrad(const TensorList& params, const AdagradOptions& options);
  void step() override;
};

}  // namespace flow::optim
