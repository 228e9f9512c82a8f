#include "optim/optimizer.h"

#include <cmath>
#include <cstdio>
#include <set>

#include <glog/logging.h>

#include "core/global/buckets.h"
#include "core/global/global_tensor.h"
#include "core/grad_mode.h"
#include "core/ops/all.h"
#include "core/ops/optimizer_update.h"

namespace flow::optim {
namespace {
std::string exact(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.17g", value);
  return buffer;
}

// Set while trace_step traces updates that a step's skip condition masks.
thread_local const Tensor* t_skip_if = nullptr;

void assign(Tensor& target, const Tensor& value) {
  if (t_skip_if == nullptr) {
    target.copy_(value);
    return;
  }
  target.copy_(where(*t_skip_if, target, value.to(target.dtype())));
}
}  // namespace

Optimizer::Optimizer(const TensorList& params, std::map<std::string, double> defaults, std::string name)
    : name_(std::move(name)), defaults_(std::move(defaults)) {
  if (defaults_.at("lr") < 0) fail(name_, "invalid learning rate: ", defaults_.at("lr"));
  add_param_group(params);
}

void Optimizer::add_param_group(const TensorList& params, std::map<std::string, double> options) {
  if (params.empty()) fail(name_, "optimizer got an empty parameter list");
  std::set<TensorImpl*> seen;
  for (const auto& group : groups_) {
    for (const auto& p : group.params) seen.insert(p.impl());
  }
  for (const auto& p : params) {
    if (!p.is_leaf()) fail(name_, "can't optimize a non-leaf tensor");
    if (!seen.insert(p.impl()).second) fail(name_, "some parameters appear in more than one parameter group");
  }
  for (const auto& [key, value] : defaults_) options.try_emplace(key, value);
  ParamGroup group;
  group.params = params;
  group.options = std::move(options);
  // The clipping keys are the Graph's, not the update's: they live in the group's fields.
  if (auto max_norm = group.options.extract("clip_grad_max_norm")) group.clip_grad_max_norm = max_norm.mapped();
  if (auto norm_type = group.options.extract("clip_grad_norm_type")) group.clip_grad_norm_type = norm_type.mapped();
  groups_.push_back(std::move(group));
}

void Optimizer::zero_grad(bool set_to_none) {
  for (auto& group : groups_) {
    for (auto& p : group.params) {
      if (!p.grad().defined()) continue;
      if (set_to_none) {
        p.set_grad(Tensor());
      } else {
        Tensor g = p.grad();
        g.zero_();
      }
    }
  }
}

Tensor StepScalars::operand(const std::string& name, const Tensor& like) const {
  auto fed = fed_.find(name);
  if (fed != fed_.end()) return fed->second;
  return scalar_tensor(value(name), TensorOptions(like.dtype()).device(like.device()));
}

double StepScalars::value(const std::string& name) const {
  CHECK(!traced()) << "per-step scalar '" << name << "' read as a double while a Graph traces the update";
  auto it = values_.find(name);
  CHECK(it != values_.end()) << "no per-step scalar '" << name << "'";
  return it->second;
}

std::map<std::string, double> Optimizer::step_scalars(const std::map<std::string, double>& options, int64_t) const {
  return {{"lr", options.at("lr")}};
}

const ParamGroup& Optimizer::group_of(const Tensor& param) const {
  for (const auto& group : groups_) {
    for (const auto& p : group.params) {
      if (p.same(param)) return group;
    }
  }
  fail(name_, "the tensor ", param.shape(), " is not a parameter of this optimizer");
}

std::map<std::string, Tensor>& Optimizer::state_for(const Tensor& param) {
  auto it = state_.find(param.impl());
  if (it == state_.end()) {
    it = state_.emplace(param.impl(), std::map<std::string, Tensor>()).first;
    autograd::NoGradGuard no_grad;
    create_state(param, group_of(param).options, it->second);
  }
  return it->second;
}

void Optimizer::step() {
  autograd::NoGradGuard no_grad;
  for (auto& group : groups_) {
    for (auto& p : group.params) {
      if (!p.grad().defined()) continue;
      auto& state = state_for(p);
      const StepScalars scalars(step_scalars(group.options, ++steps_[p.impl()]));
      update(p, p.grad(), group.options, state, scalars);
    }
  }
}

void Optimizer::init_state(const TensorList& params) {
  for (const auto& p : params) state_for(p);
}

std::vector<std::string> Optimizer::step_scalar_names(const Tensor& param) const {
  std::vector<std::string> names;
  for (const auto& [name, value] : step_scalars(group_of(param).options, 1)) names.push_back(name);
  return names;
}

bool Optimizer::zero_shardable(const Tensor& param) {
  if (!param.is_global() || param.dim() == 0) return false;
  const Placement& placement = param.placement();
  return placement.hierarchy().ndim() == 1 && placement.size() > 1 && param.sbp() == NdSbp{Sbp::broadcast()} &&
         param.size(0) >= placement.size();
}

void Optimizer::shard_state(const TensorList& params) {
  autograd::NoGradGuard no_grad;
  for (const Tensor& p : params) {
    if (!zero_shardable(p)) continue;
    for (auto& [name, t] : state_for(p)) {
      // A copy of this rank's rows, so the whole tensor's memory is released.
      if (t.shape() == p.shape() && t.is_global() && t.sbp() == p.sbp()) t = t.to_global(p.placement(), sbp::split(0)).clone();
    }
  }
}

void Optimizer::trace_step(const TensorList& params, const std::function<Tensor(size_t, const std::string&)>& fed, int64_t zero_stage,
                           const Tensor& skip_if) {
  autograd::NoGradGuard no_grad;
  if (skip_if.defined()) CHECK(skip_if.dtype() == kBool && skip_if.numel() == 1) << "skip_if is one bool";
  struct SkipScope {
    explicit SkipScope(const Tensor& skip) { t_skip_if = skip.defined() ? &skip : nullptr; }
    ~SkipScope() { t_skip_if = nullptr; }
  } skip_scope(skip_if);
  std::map<std::pair<std::string, DType>, std::vector<std::pair<Tensor, Tensor>>> updated_shards;  // (param, its updated rows)
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor p = params[i];
    const auto& options = group_of(p).options;
    std::map<std::string, double> values;
    std::map<std::string, Tensor> tensors;
    for (const auto& name : step_scalar_names(p)) tensors[name] = fed(i, name);
    const StepScalars scalars(values, tensors);
    if (!p.is_global()) {
      update(p, p.grad(), options, state_for(p), scalars);
      continue;
    }
    if (zero_stage == 0 || !zero_shardable(p)) {
      update(p, p.grad().to_global(p.placement(), p.sbp()), options, state_for(p), scalars);
      continue;
    }
    // The Graph reduced the gradient already: all-reduced (stage 1), whose rows cost no
    // communication, or reduce-scattered to them (stage 2).
    const NdSbp rows{sbp::split(0)};
    Tensor shard = p.to_global(p.placement(), rows).clone();
    update(shard, p.grad().to_global(p.placement(), rows), options, state_for(p), scalars);
    updated_shards[{p.placement().str(), p.dtype()}].emplace_back(p, shard);
  }
  // The updated rows go back to every rank with one all_gather per placement and dtype.
  for (auto& [key, updated] : updated_shards) {
    TensorList shards;
    for (const auto& [param, shard] : updated) shards.push_back(shard);
    const TensorList wholes = distributed::all_gather_row_splits(shards);
    for (size_t k = 0; k < updated.size(); ++k) updated[k].first.copy_(wholes[k]);
  }
}

std::vector<std::map<std::string, double>> Optimizer::next_step_scalars(const TensorList& params) {
  std::vector<std::map<std::string, double>> out;
  out.reserve(params.size());
  for (const auto& p : params) out.push_back(step_scalars(group_of(p).options, ++steps_[p.impl()]));
  return out;
}

StateDict Optimizer::state_dict() const {
  StateDict out;
  out.metadata()["optimizer"] = name_;
  size_t index = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string group = "param_groups." + std::to_string(g) + ".";
    for (const auto& [key, value] : groups_[g].options) out.metadata()[group + key] = exact(value);
    if (const auto& max_norm = groups_[g].clip_grad_max_norm) {
      out.metadata()[group + "clip_grad_max_norm"] = exact(*max_norm);
      out.metadata()[group + "clip_grad_norm_type"] = exact(groups_[g].clip_grad_norm_type);
    }
    out.metadata()[group + "size"] = std::to_string(groups_[g].params.size());
    for (const auto& p : groups_[g].params) {
      const std::string prefix = "state." + std::to_string(index++) + ".";
      auto steps = steps_.find(p.impl());
      if (steps != steps_.end()) out.metadata()[prefix + "step"] = std::to_string(steps->second);
      auto state = state_.find(p.impl());
      if (state == state_.end()) continue;
      for (const auto& [name, t] : state->second) out.insert(prefix + name, t);
    }
  }
  return out;
}

void Optimizer::load_state_dict(const StateDict& state) {
  const auto& meta = state.metadata();
  auto found = meta.find("optimizer");
  if (found == meta.end() || found->second != name_) {
    fail("load_state_dict", "the state was saved by ", found == meta.end() ? "no optimizer" : found->second, ", not ", name_);
  }
  size_t index = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string group = "param_groups." + std::to_string(g) + ".";
    auto size = meta.find(group + "size");
    if (size == meta.end() || size->second != std::to_string(groups_[g].params.size())) {
      fail("load_state_dict", "loaded state has a different parameter group layout (group ", g, ")");
    }
    for (auto& [key, value] : groups_[g].options) {
      auto saved = meta.find(group + key);
      if (saved != meta.end()) value = std::stod(saved->second);
    }
    if (auto saved = meta.find(group + "clip_grad_max_norm"); saved != meta.end()) {
      groups_[g].clip_grad_max_norm = std::stod(saved->second);
      if (auto norm_type = meta.find(group + "clip_grad_norm_type"); norm_type != meta.end()) {
        groups_[g].clip_grad_norm_type = std::stod(norm_type->second);
      }
    }
    for (const auto& p : groups_[g].params) {
      const std::string prefix = "state." + std::to_string(index++) + ".";
      auto steps = meta.find(prefix + "step");
      if (steps != meta.end()) steps_[p.impl()] = std::stoll(steps->second);
      for (const auto& [name, t] : state) {
        if (name.rfind(prefix, 0) != 0) continue;
        if (!(t.shape() == p.shape())) fail("load_state_dict", "state ", name, " has shape ", t.shape(), " but the parameter has ", p.shape());
        // Existing state tensors are written in place: a compiled Graph holds them as variables.
        Tensor& slot = state_[p.impl()][name.substr(prefix.size())];
        // A checkpoint holds logical tensors: a global parameter's state takes its layout.
        const Tensor value = distributed::laid_out_like(t.to(p.device()).to(p.dtype()), p);
        if (slot.defined() && slot.shape() == value.shape()) {
          autograd::NoGradGuard no_grad;
          slot.copy_(value);
        } else {
          slot = value.clone();
        }
      }
    }
  }
}

SGD::SGD(const TensorList& params, const SGDOptions& o)
    : Optimizer(params,
                o.with_clip_grad({{"lr", o.lr_}, {"momentum", o.momentum_}, {"dampening", o.dampening_}, {"weight_decay", o.weight_decay_},
                                  {"nesterov", o.nesterov_ ? 1.0 : 0.0}}),
                "SGD") {
  if (o.momentum_ < 0) fail("SGD", "invalid momentum value: ", o.momentum_);
  if (o.nesterov_ && (o.momentum_ <= 0 || o.dampening_ != 0)) fail("SGD", "nesterov momentum requires a momentum and zero dampening");
}

void SGD::create_state(const Tensor& param, const std::map<std::string, double>& options, std::map<std::string, Tensor>& state) {
  if (options.at("momentum") != 0) state["momentum_buffer"] = zeros_like(param);
}

// The momentum buffer starts at zero and takes the whole first gradient (PyTorch's buf = d):
// dampening applies from the second step on.
std::map<std::string, double> SGD::step_scalars(const std::map<std::string, double>& options, int64_t step) const {
  return {{"lr", options.at("lr")}, {"grad_scale", step == 1 ? 1.0 : 1.0 - options.at("dampening")}};
}

void SGD::update(Tensor& p, const Tensor& grad, const std::map<std::string, double>& options, std::map<std::string, Tensor>& state,
                 const StepScalars& scalars) {
  const double momentum = options.at("momentum"), weight_decay = options.at("weight_decay");
  const bool nesterov = options.at("nesterov") != 0;
  Tensor* buffer = momentum != 0 ? &state.at("momentum_buffer") : nullptr;
  if (!scalars.traced() && sgd_update_supported(p, grad)) {
    sgd_update_(p, grad, buffer, scalars.value("lr"), momentum, 1.0 - scalars.value("grad_scale"), weight_decay, nesterov, true);
    return;
  }
  // Traced updates and devices or layouts without the fused kernel: the same update in element-wise ops.
  Tensor d = grad;
  if (weight_decay != 0) d = d + p * weight_decay;
  if (momentum != 0) {
    assign(*buffer, *buffer * momentum + d * scalars.operand("grad_scale", p));
    d = nesterov ? d + *buffer * momentum : *buffer;
  }
  assign(p, p - d * scalars.operand("lr", p));
}

Adam::Adam(const TensorList& params, const AdamOptions& options) : Adam(params, options, "Adam", false) {}

template <typename Options>
Adam::Adam(const TensorList& params, const AdamOptionsBase<Options>& o, std::string name, bool decoupled)
    : Optimizer(params,
                o.with_clip_grad({{"lr", o.lr_}, {"beta1", o.beta1_}, {"beta2", o.beta2_}, {"eps", o.eps_}, {"weight_decay", o.weight_decay_}}),
                std::move(name)),
      decoupled_weight_decay_(decoupled) {
  if (o.beta1_ < 0 || o.beta1_ >= 1 || o.beta2_ < 0 || o.beta2_ >= 1) {
    fail("Adam", "invalid beta parameters: (", o.beta1_, ", ", o.beta2_, ")");
  }
  if (o.eps_ < 0) fail("Adam", "invalid epsilon value: ", o.eps_);
}

void Adam::create_state(const Tensor& param, const std::map<std::string, double>&, std::map<std::string, Tensor>& state) {
  state["exp_avg"] = zeros_like(param);
  state["exp_avg_sq"] = zeros_like(param);
}

std::map<std::string, double> Adam::step_scalars(const std::map<std::string, double>& options, int64_t step) const {
  const double lr = options.at("lr");
  const double bias1 = 1.0 - std::pow(options.at("beta1"), static_cast<double>(step));
  const double bias2 = 1.0 - std::pow(options.at("beta2"), static_cast<double>(step));
  return {{"lr", lr}, {"step_size", lr / bias1}, {"bias2_sqrt", std::sqrt(bias2)}};
}

void Adam::update(Tensor& p, const Tensor& grad, const std::map<std::string, double>& options, std::map<std::string, Tensor>& state,
                  const StepScalars& scalars) {
  const double beta1 = options.at("beta1"), beta2 = options.at("beta2");
  const double eps = options.at("eps"), weight_decay = options.at("weight_decay");
  Tensor g = grad;
  if (weight_decay != 0) {
    if (decoupled_weight_decay_) assign(p, p * (1.0 - scalars.operand("lr", p) * weight_decay));
    else g = g + p * weight_decay;
  }
  Tensor& m = state.at("exp_avg");
  Tensor& v = state.at("exp_avg_sq");
  assign(m, m * beta1 + g * (1.0 - beta1));
  assign(v, v * beta2 + g * g * (1.0 - beta2));
  const Tensor denom = sqrt(v) / scalars.operand("bias2_sqrt", p) + eps;
  assign(p, p - m / denom * scalars.operand("step_size", p));
}

AdamW::AdamW(const TensorList& params, const AdamWOptions& options) : Adam(params, options, "AdamW", true) {}

RMSprop::RMSprop(const TensorList& params, const RMSpropOptions& o)
    : Optimizer(params,
                o.with_clip_grad({{"lr", o.lr_}, {"alpha", o.alpha_}, {"eps", o.eps_}, {"weight_decay", o.weight_decay_},
                                  {"momentum", o.momentum_}, {"centered", o.centered_ ? 1.0 : 0.0}}),
                "RMSprop") {
  if (o.alpha_ < 0) fail("RMSprop", "invalid alpha value: ", o.alpha_);
  if (o.eps_ < 0) fail("RMSprop", "invalid epsilon value: ", o.eps_);
}

void RMSprop::create_state(const Tensor& param, const std::map<std::string, double>& options, std::map<std::string, Tensor>& state) {
  state["square_avg"] = zeros_like(param);
  if (options.at("centered") != 0) state["grad_avg"] = zeros_like(param);
  if (options.at("momentum") > 0) state["momentum_buffer"] = zeros_like(param);
}

void RMSprop::update(Tensor& p, const Tensor& grad, const std::map<std::string, double>& options, std::map<std::string, Tensor>& state,
                     const StepScalars& scalars) {
  const double alpha = options.at("alpha"), eps = options.at("eps");
  const double weight_decay = options.at("weight_decay"), momentum = options.at("momentum");
  Tensor g = grad;
  if (weight_decay != 0) g = g + p * weight_decay;
  Tensor& square_avg = state.at("square_avg");
  assign(square_avg, square_avg * alpha + g * g * (1.0 - alpha));
  Tensor avg = square_avg;
  if (options.at("centered") != 0) {
    Tensor& grad_avg = state.at("grad_avg");
    assign(grad_avg, grad_avg * alpha + g * (1.0 - alpha));
    avg = avg - grad_avg * grad_avg;
  }
  const Tensor denom = sqrt(avg) + eps;
  const Tensor lr = scalars.operand("lr", p);
  if (momentum > 0) {
    Tensor& buf = state.at("momentum_buffer");
    assign(buf, buf * momentum + g / denom);
    assign(p, p - buf * lr);
  } else {
    assign(p, p - g / denom * lr);
  }
}

Adagrad::Adagrad(const TensorList& params, const AdagradOptions& o)
    : Optimizer(params,
                o.with_clip_grad({{"lr", o.lr_}, {"lr_decay", o.lr_decay_}, {"weight_decay", o.weight_decay_},
                                  {"initial_accumulator_value", o.initial_accumulator_value_}, {"eps", o.eps_}}),
                "Adagrad") {
  if (o.lr_decay_ < 0) fail("Adagrad", "invalid lr_decay value: ", o.lr_decay_);
}

void Adagrad::create_state(const Tensor& param, const std::map<std::string, double>& options, std::map<std::string, Tensor>& state) {
  state["sum"] = full_like(param, options.at("initial_accumulator_value"));
}

std::map<std::string, double> Adagrad::step_scalars(const std::map<std::string, double>& options, int64_t step) const {
  return {{"lr", options.at("lr") / (1 + static_cast<double>(step - 1) * options.at("lr_decay"))}};
}

void Adagrad::update(Tensor& p, const Tensor& grad, const std::map<std::string, double>& options, std::map<std::string, Tensor>& state,
                     const StepScalars& scalars) {
  const double eps = options.at("eps"), weight_decay = options.at("weight_decay");
  Tensor g = grad;
  if (weight_decay != 0) g = g + p * weight_decay;
  Tensor& sum_sq = state.at("sum");
  assign(sum_sq, sum_sq + g * g);
  assign(p, p - g / (sqrt(sum_sq) + eps) * scalars.operand("lr", p));
}

}  // namespace flow::optim
