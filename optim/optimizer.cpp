#include "optim/optimizer.h"

#include <cmath>
#include <cstdio>
#include <set>

#include "autograd/grad_mode.h"
#include "core/functional.h"
#include "core/ops/optimizer_update.h"

namespace flow::optim {
namespace {
std::string exact(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.17g", value);
  return buffer;
}

void assign(Tensor& target, const Tensor& value) { target.copy_(value); }
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
  groups_.push_back({params, std::move(options)});
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

void Optimizer::for_each_update(const std::function<void(const std::map<std::string, double>&, Tensor&)>& update) {
  autograd::NoGradGuard no_grad;
  for (auto& group : groups_) {
    for (auto& p : group.params) {
      if (p.grad().defined()) update(group.options, p);
    }
  }
}

std::map<std::string, Tensor>& Optimizer::state_of(const Tensor& param) { return state_[param.impl()]; }
int64_t& Optimizer::step_of(const Tensor& param) { return steps_[param.impl()]; }

StateDict Optimizer::state_dict() const {
  StateDict out;
  out.metadata()["optimizer"] = name_;
  size_t index = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (const auto& [key, value] : groups_[g].options) out.metadata()["param_groups." + std::to_string(g) + "." + key] = exact(value);
    out.metadata()["param_groups." + std::to_string(g) + ".size"] = std::to_string(groups_[g].params.size());
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
    for (const auto& p : groups_[g].params) {
      const std::string prefix = "state." + std::to_string(index++) + ".";
      auto steps = meta.find(prefix + "step");
      if (steps != meta.end()) steps_[p.impl()] = std::stoll(steps->second);
      for (const auto& [name, t] : state) {
        if (name.rfind(prefix, 0) != 0) continue;
        if (!(t.shape() == p.shape())) fail("load_state_dict", "state ", name, " has shape ", t.shape(), " but the parameter has ", p.shape());
        state_[p.impl()][name.substr(prefix.size())] = t.to(p.device()).to(p.dtype()).clone();
      }
    }
  }
}

SGD::SGD(const TensorList& params, const SGDOptions& o)
    : Optimizer(params,
                {{"lr", o.lr_}, {"momentum", o.momentum_}, {"dampening", o.dampening_}, {"weight_decay", o.weight_decay_},
                 {"nesterov", o.nesterov_ ? 1.0 : 0.0}},
                "SGD") {
  if (o.momentum_ < 0) fail("SGD", "invalid momentum value: ", o.momentum_);
  if (o.nesterov_ && (o.momentum_ <= 0 || o.dampening_ != 0)) fail("SGD", "nesterov momentum requires a momentum and zero dampening");
}

void SGD::step() {
  for_each_update([&](const std::map<std::string, double>& options, Tensor& p) {
    const double lr = options.at("lr"), momentum = options.at("momentum");
    const double dampening = options.at("dampening"), weight_decay = options.at("weight_decay");
    const bool nesterov = options.at("nesterov") != 0;
    if (sgd_update_supported(p, p.grad())) {
      auto& state = state_of(p);
      Tensor* buffer = nullptr;
      bool initialized = true;
      if (momentum != 0) {
        auto it = state.find("momentum_buffer");
        initialized = it != state.end();
        if (!initialized) it = state.emplace("momentum_buffer", empty_like(p)).first;
        buffer = &it->second;
      }
      sgd_update_(p, p.grad(), buffer, lr, momentum, dampening, weight_decay, nesterov, initialized);
      return;
    }
    // Devices or layouts without the fused kernel: the same update in element-wise ops.
    Tensor d = p.grad();
    if (weight_decay != 0) d = d + p * weight_decay;
    if (momentum != 0) {
      auto& state = state_of(p);
      auto it = state.find("momentum_buffer");
      if (it == state.end()) {
        it = state.emplace("momentum_buffer", d.clone()).first;
      } else {
        assign(it->second, it->second * momentum + d * (1.0 - dampening));
      }
      d = nesterov ? d + it->second * momentum : it->second;
    }
    assign(p, p - d * lr);
  });
}

Adam::Adam(const TensorList& params, const AdamOptions& options) : Adam(params, options, "Adam", false) {}

Adam::Adam(const TensorList& params, const AdamOptions& o, std::string name, bool decoupled)
    : Optimizer(params,
                {{"lr", o.lr_}, {"beta1", o.beta1_}, {"beta2", o.beta2_}, {"eps", o.eps_}, {"weight_decay", o.weight_decay_}},
                std::move(name)),
      decoupled_weight_decay_(decoupled) {
  if (o.beta1_ < 0 || o.beta1_ >= 1 || o.beta2_ < 0 || o.beta2_ >= 1) {
    fail("Adam", "invalid beta parameters: (", o.beta1_, ", ", o.beta2_, ")");
  }
  if (o.eps_ < 0) fail("Adam", "invalid epsilon value: ", o.eps_);
}

void Adam::step() {
  for_each_update([&](const std::map<std::string, double>& options, Tensor& p) {
    const double lr = options.at("lr"), beta1 = options.at("beta1"), beta2 = options.at("beta2");
    const double eps = options.at("eps"), weight_decay = options.at("weight_decay");
    Tensor g = p.grad();
    if (weight_decay != 0) {
      if (decoupled_weight_decay_) assign(p, p * (1.0 - lr * weight_decay));
      else g = g + p * weight_decay;
    }
    auto& state = state_of(p);
    if (!state.count("exp_avg")) {
      state["exp_avg"] = zeros_like(p);
      state["exp_avg_sq"] = zeros_like(p);
    }
    const int64_t step = ++step_of(p);
    Tensor& m = state["exp_avg"];
    Tensor& v = state["exp_avg_sq"];
    assign(m, m * beta1 + g * (1.0 - beta1));
    assign(v, v * beta2 + g * g * (1.0 - beta2));
    const double bias1 = 1.0 - std::pow(beta1, static_cast<double>(step));
    const double bias2 = 1.0 - std::pow(beta2, static_cast<double>(step));
    const Tensor denom = sqrt(v) / std::sqrt(bias2) + eps;
    assign(p, p - m / denom * (lr / bias1));
  });
}

AdamW::AdamW(const TensorList& params, const AdamOptions& options) : Adam(params, options, "AdamW", true) {}

RMSprop::RMSprop(const TensorList& params, const RMSpropOptions& o)
    : Optimizer(params,
                {{"lr", o.lr_}, {"alpha", o.alpha_}, {"eps", o.eps_}, {"weight_decay", o.weight_decay_},
                 {"momentum", o.momentum_}, {"centered", o.centered_ ? 1.0 : 0.0}},
                "RMSprop") {
  if (o.alpha_ < 0) fail("RMSprop", "invalid alpha value: ", o.alpha_);
  if (o.eps_ < 0) fail("RMSprop", "invalid epsilon value: ", o.eps_);
}

void RMSprop::step() {
  for_each_update([&](const std::map<std::string, double>& options, Tensor& p) {
    const double lr = options.at("lr"), alpha = options.at("alpha"), eps = options.at("eps");
    const double weight_decay = options.at("weight_decay"), momentum = options.at("momentum");
    const bool centered = options.at("centered") != 0;
    Tensor g = p.grad();
    if (weight_decay != 0) g = g + p * weight_decay;
    auto& state = state_of(p);
    if (!state.count("square_avg")) state["square_avg"] = zeros_like(p);
    ++step_of(p);
    Tensor& square_avg = state["square_avg"];
    assign(square_avg, square_avg * alpha + g * g * (1.0 - alpha));
    Tensor avg = square_avg;
    if (centered) {
      if (!state.count("grad_avg")) state["grad_avg"] = zeros_like(p);
      Tensor& grad_avg = state["grad_avg"];
      assign(grad_avg, grad_avg * alpha + g * (1.0 - alpha));
      avg = avg - grad_avg * grad_avg;
    }
    const Tensor denom = sqrt(avg) + eps;
    if (momentum > 0) {
      if (!state.count("momentum_buffer")) state["momentum_buffer"] = zeros_like(p);
      Tensor& buf = state["momentum_buffer"];
      assign(buf, buf * momentum + g / denom);
      assign(p, p - buf * lr);
    } else {
      assign(p, p - g / denom * lr);
    }
  });
}

Adagrad::Adagrad(const TensorList& params, const AdagradOptions& o)
    : Optimizer(params,
                {{"lr", o.lr_}, {"lr_decay", o.lr_decay_}, {"weight_decay", o.weight_decay_},
                 {"initial_accumulator_value", o.initial_accumulator_value_}, {"eps", o.eps_}},
                "Adagrad") {
  if (o.lr_decay_ < 0) fail("Adagrad", "invalid lr_decay value: ", o.lr_decay_);
}

void Adagrad::step() {
  for_each_update([&](const std::map<std::string, double>& options, Tensor& p) {
    const double lr = options.at("lr"), lr_decay = options.at("lr_decay"), eps = options.at("eps");
    const double weight_decay = options.at("weight_decay");
    Tensor g = p.grad();
    if (weight_decay != 0) g = g + p * weight_decay;
    auto& state = state_of(p);
    if (!state.count("sum")) state["sum"] = full_like(p, options.at("initial_accumulator_value"));
    const int64_t step = ++step_of(p);
    Tensor& sum_sq = state["sum"];
    assign(sum_sq, sum_sq + g * g);
    const double clr = lr / (1 + static_cast<double>(step - 1) * lr_decay);
    assign(p, p - g / (sqrt(sum_sq) + eps) * clr);
  });
}

}  // namespace flow::optim
