#pragma once
// Optimizers. Each update is written once in functional ops over (param, grad, state, per-step
// scalars), run without recording gradients, so a Graph traces the same update into its Job.
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/serialization.h"
#include "core/tensor.h"

namespace flow::optim {

// A group of parameters sharing hyper-parameters (lr, momentum, ...), as in PyTorch.
struct ParamGroup {
  TensorList params;
  std::map<std::string, double> options;
  // nn::Graph's gradient clipping of this group, OneFlow's param-group keys of the same names:
  // before the group's update the Graph scales its gradients as nn::utils::clip_grad_norm_(params,
  // clip_grad_max_norm, clip_grad_norm_type) does (training rewrite "gradient_clipping"). Unset:
  // no clipping. An eager step() ignores both, as PyTorch's optimizers have no clipping: there
  // the user calls clip_grad_norm_ between backward() and step().
  std::optional<double> clip_grad_max_norm;
  double clip_grad_norm_type = 2.0;
};

// The clipping options every optimizer's options take (chained setters return the derived type);
// they become the defaults of every parameter group.
template <typename Derived>
struct ClipGradOptions {
  Derived& clip_grad_max_norm(double v) { clip_grad_max_norm_ = v; return static_cast<Derived&>(*this); }
  Derived& clip_grad_norm_type(double v) { clip_grad_norm_type_ = v; return static_cast<Derived&>(*this); }
  std::optional<double> clip_grad_max_norm_;
  double clip_grad_norm_type_ = 2.0;

  // The hyper-parameter defaults with the clipping keys add_param_group reads.
  std::map<std::string, double> with_clip_grad(std::map<std::string, double> defaults) const {
    if (clip_grad_max_norm_) defaults["clip_grad_max_norm"] = *clip_grad_max_norm_;
    defaults["clip_grad_norm_type"] = clip_grad_norm_type_;
    return defaults;
  }
};

// The values of one update that change from step to step (the learning rate a scheduler sets,
// Adam's bias corrections, SGD's first-step dampening). An eager step knows them as doubles; a
// Graph traces the update once with each of them as a 0-d tensor that it feeds on every run.
class StepScalars {
 public:
  explicit StepScalars(std::map<std::string, double> values, std::map<std::string, Tensor> fed = {})
      : values_(std::move(values)), fed_(std::move(fed)) {}
  // The value as a 0-d operand of like's dtype and device (the fed tensor while tracing).
  Tensor operand(const std::string& name, const Tensor& like) const;
  // The value as a double; only while not tracing (the fused eager kernels take doubles).
  double value(const std::string& name) const;
  bool traced() const { return !fed_.empty(); }

 private:
  std::map<std::string, double> values_;
  std::map<std::string, Tensor> fed_;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Applies one update to every parameter that has a gradient.
  void step();
  // Resets gradients (to undefined, or to zeros with set_to_none=false).
  void zero_grad(bool set_to_none = true);
  // New group; hyper-parameters not given take the optimizer's defaults. The keys
  // "clip_grad_max_norm" and "clip_grad_norm_type" set the group's clipping fields.
  void add_param_group(const TensorList& params, std::map<std::string, double> options = {});
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  const std::string& name() const { return name_; }
  // Hyper-parameters of every group (with its clipping when set) and per-parameter state
  // ("state.<index>.<name>", indices counting parameters across groups in order), so training
  // resumes exactly.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

  // Graph mode. A Graph creates every parameter's state before tracing, traces one update of the
  // parameters in `params` with fed(index, name) giving the lazy per-step scalar `name` of
  // parameter `index` (its position in `params`), and before every run asks for the values to
  // feed (which advances those parameters' step counts, as an eager step would).
  void init_state(const TensorList& params);
  std::vector<std::string> step_scalar_names(const Tensor& param) const;
  // A global parameter is updated with a gradient of its own sbp (as OneFlow does): the
  // partial-sum gradient of a broadcast parameter is all-reduced once. With zero_stage >= 1
  // (nn::Graph's config().enable_zero, ZeRO), a parameter that zero_shardable() accepts is
  // updated on this rank's rows only, with its state split the same way (shard_state), and the
  // updated rows of all such parameters are then all-gathered in one bucket per placement and
  // dtype; the Graph reduces their gradients first (stage 1 all-reduces them, stage 2
  // reduce-scatters them to the rows, each in buckets).
  // With skip_if (a bool one-element tensor) every parameter and state tensor keeps its value when
  // it is true: nn::Graph's grad scaler skips steps whose gradients hold an inf or NaN this way.
  void trace_step(const TensorList& params, const std::function<Tensor(size_t, const std::string&)>& fed, int64_t zero_stage = 0,
                  const Tensor& skip_if = Tensor());
  // A data-parallel parameter: global, broadcast over a 1-D placement of several ranks, with at
  // least one row per rank.
  static bool zero_shardable(const Tensor& param);
  // Keeps the param-shaped state of every zero_shardable parameter split along dim 0 (S(0)).
  void shard_state(const TensorList& params);
  std::vector<std::map<std::string, double>> next_step_scalars(const TensorList& params);

 protected:
  Optimizer(const TensorList& params, std::map<std::string, double> defaults, std::string name);
  // Creates the per-parameter state (zeros and the like) before the first update.
  virtual void create_state(const Tensor& param, const std::map<std::string, double>& options,
                            std::map<std::string, Tensor>& state) = 0;
  // The per-step scalars of update number `step` (1-based); by default the learning rate.
  virtual std::map<std::string, double> step_scalars(const std::map<std::string, double>& options, int64_t step) const;
  // One parameter's update in functional ops (run without recording gradients), writing param
  // and state in place.
  virtual void update(Tensor& param, const Tensor& grad, const std::map<std::string, double>& options,
                      std::map<std::string, Tensor>& state, const StepScalars& scalars) = 0;

 private:
  const ParamGroup& group_of(const Tensor& param) const;
  std::map<std::string, Tensor>& state_for(const Tensor& param);

  std::string name_;
  std::map<std::string, double> defaults_;
  std::vector<ParamGroup> groups_;
  std::map<TensorImpl*, std::map<std::string, Tensor>> state_;
  std::map<TensorImpl*, int64_t> steps_;
};

struct SGDOptions : ClipGradOptions<SGDOptions> {
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

 protected:
  void create_state(const Tensor& param, const std::map<std::string, double>& options, std::map<std::string, Tensor>& state) override;
  std::map<std::string, double> step_scalars(const std::map<std::string, double>& options, int64_t step) const override;
  void update(Tensor& param, const Tensor& grad, const std::map<std::string, double>& options, std::map<std::string, Tensor>& state,
              const StepScalars& scalars) override;
};

// Adam's and AdamW's options (chained setters return the derived type). Their defaults differ
// only in weight_decay, as in PyTorch: 0 for Adam, 0.01 for AdamW.
template <typename Derived>
struct AdamOptionsBase : ClipGradOptions<Derived> {
  AdamOptionsBase(double lr, double weight_decay) : lr_(lr), weight_decay_(weight_decay) {}
  Derived& lr(double v) { lr_ = v; return self(); }
  Derived& betas(double beta1, double beta2) { beta1_ = beta1; beta2_ = beta2; return self(); }
  Derived& eps(double v) { eps_ = v; return self(); }
  Derived& weight_decay(double v) { weight_decay_ = v; return self(); }
  double lr_, beta1_ = 0.9, beta2_ = 0.999, eps_ = 1e-8, weight_decay_;

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
};

struct AdamOptions : AdamOptionsBase<AdamOptions> {
  explicit AdamOptions(double lr = 1e-3) : AdamOptionsBase(lr, 0.0) {}
};

struct AdamWOptions : AdamOptionsBase<AdamWOptions> {
  explicit AdamWOptions(double lr = 1e-3) : AdamOptionsBase(lr, 1e-2) {}
};

// Adam: weight decay added to the gradient (L2), like torch.optim.Adam.
class Adam : public Optimizer {
 public:
  Adam(const TensorList& params, const AdamOptions& options);

 protected:
  template <typename Options>
  Adam(const TensorList& params, const AdamOptionsBase<Options>& options, std::string name, bool decoupled);
  void create_state(const Tensor& param, const std::map<std::string, double>& options, std::map<std::string, Tensor>& state) override;
  std::map<std::string, double> step_scalars(const std::map<std::string, double>& options, int64_t step) const override;
  void update(Tensor& param, const Tensor& grad, const std::map<std::string, double>& options, std::map<std::string, Tensor>& state,
              const StepScalars& scalars) override;

 private:
  bool decoupled_weight_decay_;
};

// AdamW: decoupled weight decay (p -= lr * wd * p); AdamWOptions' weight_decay defaults to 0.01
// like torch.optim.AdamW.
class AdamW : public Adam {
 public:
  explicit AdamW(const TensorList& params, const AdamWOptions& options = AdamWOptions());
};

struct RMSpropOptions : ClipGradOptions<RMSpropOptions> {
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

 protected:
  void create_state(const Tensor& param, const std::map<std::string, double>& options, std::map<std::string, Tensor>& state) override;
  void update(Tensor& param, const Tensor& grad, const std::map<std::string, double>& options, std::map<std::string, Tensor>& state,
              const StepScalars& scalars) override;
};

struct AdagradOptions : ClipGradOptions<AdagradOptions> {
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

 protected:
  void create_state(const Tensor& param, const std::map<std::string, double>& options, std::map<std::string, Tensor>& state) override;
  std::map<std::string, double> step_scalars(const std::map<std::string, double>& options, int64_t step) const override;
  void update(Tensor& param, const Tensor& grad, const std::map<std::string, double>& options, std::map<std::string, Tensor>& state,
              const StepScalars& scalars) override;
};

}  // namespace flow::optim
