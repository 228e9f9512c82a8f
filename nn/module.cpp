#include "nn/module.h"

#include <set>
#include <sstream>

#include "core/autograd_meta.h"
#include "core/global/global_tensor.h"
#include "core/grad_mode.h"
#include "core/ops/all.h"

namespace flow::nn {
namespace {
template <typename Entries>
bool has_name(const Entries& entries, const std::string& name) {
  for (const auto& entry : entries) {
    if (entry.first == name) return true;
  }
  return false;
}

std::string join(const std::string& prefix, const std::string& name) { return prefix.empty() ? name : prefix + "." + name; }
}  // namespace

namespace {
thread_local ModuleCallObserver* t_module_call_observer = nullptr;
}

ModuleCallObserver* set_module_call_observer(ModuleCallObserver* observer) {
  ModuleCallObserver* previous = t_module_call_observer;
  t_module_call_observer = observer;
  return previous;
}

Tensor Module::operator()(const Tensor& input) {
  ModuleCallObserver* observer = t_module_call_observer;
  if (observer == nullptr) return forward(input);
  observer->enter(*this, input);
  Tensor output;
  try {
    output = forward(input);
  } catch (...) {
    observer->exit(*this, Tensor());
    throw;
  }
  observer->exit(*this, output);
  return output;
}

Tensor Module::forward(const Tensor&) {
  fail(name(), "forward(Tensor) is not implemented by this module");
}

void Module::check_new_name(const std::string& name, const char* kind) const {
  if (name.empty() || name.find('.') != std::string::npos) {
    fail("register_" + std::string(kind), "invalid name '", name, "': must be non-empty and contain no '.'");
  }
  if (has_name(parameters_, name) || has_name(buffers_, name) || has_name(children_, name)) {
    fail("register_" + std::string(kind), "attribute '", name, "' already exists in ", this->name());
  }
}

Tensor& Module::register_parameter(const std::string& name, Tensor tensor, bool requires_grad) {
  check_new_name(name, "parameter");
  if (tensor.defined()) {
    tensor = tensor.is_leaf() ? tensor : tensor.detach();
    tensor.requires_grad_(requires_grad);
  }
  parameters_.emplace_back(name, std::move(tensor));
  return parameters_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor tensor) {
  check_new_name(name, "buffer");
  buffers_.emplace_back(name, std::move(tensor));
  return buffers_.back().second;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name, "module");
  if (!module) fail("register_module", "module '", name, "' is null");
  children_.emplace_back(name, std::move(module));
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> result;
  std::set<TensorImpl*> seen;  // a parameter shared between modules is listed once
  auto add = [&](const std::string& name, const Tensor& t) {
    if (t.defined() && seen.insert(t.impl()).second) result.emplace_back(name, t);
  };
  for (const auto& [name, t] : parameters_) add(name, t);
  if (recurse) {
    for (const auto& [child_name, child] : children_) {
      for (const auto& [name, t] : child->named_parameters(true)) add(join(child_name, name), t);
    }
  }
  return result;
}

TensorList Module::parameters(bool recurse) const {
  TensorList result;
  for (auto& entry : named_parameters(recurse)) result.push_back(entry.second);
  return result;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> result;
  for (const auto& [name, t] : buffers_) {
    if (t.defined()) result.emplace_back(name, t);
  }
  if (recurse) {
    for (const auto& [child_name, child] : children_) {
      for (const auto& [name, t] : child->named_buffers(true)) result.emplace_back(join(child_name, name), t);
    }
  }
  return result;
}

TensorList Module::buffers(bool recurse) const {
  TensorList result;
  for (auto& entry : named_buffers(recurse)) result.push_back(entry.second);
  return result;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> result;
  for (const auto& entry : children_) result.push_back(entry.second);
  return result;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const { return children_; }

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules(const std::string& prefix) {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> result{{prefix, shared_from_this()}};
  for (const auto& [name, child] : children_) {
    for (auto& entry : child->named_modules(join(prefix, name))) result.push_back(std::move(entry));
  }
  return result;
}

std::vector<std::shared_ptr<Module>> Module::modules() {
  std::vector<std::shared_ptr<Module>> result;
  for (auto& entry : named_modules()) result.push_back(entry.second);
  return result;
}

StateDict Module::state_dict() const {
  StateDict state;
  auto collect = [&](const Module& module, const std::string& prefix, auto&& self) -> void {
    for (const auto& [name, t] : module.parameters_) {
      if (t.defined()) state.insert(join(prefix, name), t.detach());
    }
    for (const auto& [name, t] : module.buffers_) {
      if (t.defined()) state.insert(join(prefix, name), t.detach());
    }
    for (const auto& [name, child] : module.children_) self(*child, join(prefix, name), self);
  };
  collect(*this, "", collect);
  return state;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  std::vector<std::pair<std::string, Tensor>> own = named_parameters();
  for (auto& entry : named_buffers()) own.push_back(entry);
  std::vector<std::string> missing, unexpected, mismatched;
  std::set<std::string> own_names;
  for (const auto& [name, t] : own) {
    own_names.insert(name);
    if (!state.contains(name)) {
      missing.push_back(name);
    } else if (!(state.at(name).shape() == t.shape())) {
      mismatched.push_back(detail::concat(name, ": checkpoint ", state.at(name).shape(), ", model ", t.shape()));
    }
  }
  for (const auto& name : state.keys()) {
    if (!own_names.count(name)) unexpected.push_back(name);
  }
  auto list = [](const std::vector<std::string>& names) {
    std::string s;
    for (const auto& n : names) s += (s.empty() ? "" : ", ") + ("\"" + n + "\"");
    return s;
  };
  std::string problems;
  if (!mismatched.empty()) problems += " size mismatch for " + list(mismatched) + ".";
  if (strict && !missing.empty()) problems += " Missing key(s) in state_dict: " + list(missing) + ".";
  if (strict && !unexpected.empty()) problems += " Unexpected key(s) in state_dict: " + list(unexpected) + ".";
  if (!problems.empty()) fail("load_state_dict", "error(s) in loading state_dict for ", name(), ":", problems);
  autograd::NoGradGuard no_grad;
  for (auto& [name, t] : own) {
    // A checkpoint holds logical tensors: a global module takes its pieces of them.
    if (state.contains(name)) t.copy_(distributed::laid_out_like(state.at(name), t));
  }
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::replace_data(Tensor& target, const Tensor& value) {
  TensorImpl& impl = *target.impl();
  impl.shape = value.shape();
  impl.strides = value.strides();
  impl.offset = value.storage_offset();
  impl.dtype = value.dtype();
  impl.device = value.device();
  impl.storage = value.storage();
  impl.global = value.impl()->global;
  if (impl.autograd && impl.autograd->grad.defined()) {
    // A local gradient does not fit a global tensor.
    impl.autograd->grad = impl.global ? Tensor() : impl.autograd->grad.to(value.device()).to(value.dtype());
  }
}

void Module::to_global(const Placement& placement, const NdSbp& sbp, const std::map<std::string, NdSbp>& sbp_of) {
  autograd::NoGradGuard no_grad;
  std::vector<std::pair<std::string, Tensor>> state = named_parameters();
  for (auto& named : named_buffers()) state.push_back(named);
  std::set<std::string> names;
  for (const auto& [name, t] : state) names.insert(name);
  for (const auto& [name, s] : sbp_of) {
    if (!names.count(name)) fail("to_global", "sbp_of names '", name, "', which is not a parameter or buffer of ", this->name());
  }
  for (auto& [name, t] : state) {
    auto own = sbp_of.find(name);
    const NdSbp& wanted = own != sbp_of.end() ? own->second : sbp;
    replace_data(t, t.is_global() ? t.to_global(placement, wanted) : distributed::from_whole(t, placement, wanted));
  }
}

void Module::to(Device device) {
  autograd::NoGradGuard no_grad;
  for (auto& [name, t] : named_parameters()) replace_data(t, t.to(device));
  for (auto& [name, t] : named_buffers()) replace_data(t, t.to(device));
}

void Module::to(DType dtype) {
  autograd::NoGradGuard no_grad;
  // Only floating tensors change dtype (integer buffers such as counters keep theirs).
  for (auto& [name, t] : named_parameters()) {
    if (t.is_floating_point()) replace_data(t, t.to(dtype));
  }
  for (auto& [name, t] : named_buffers()) {
    if (t.is_floating_point()) replace_data(t, t.to(dtype));
  }
}

void Module::zero_grad(bool set_to_none) {
  for (auto& t : parameters()) {
    if (!t.grad().defined()) continue;
    if (set_to_none) {
      t.set_grad(Tensor());
    } else {
      Tensor g = t.grad();
      g.zero_();
    }
  }
}

void Module::pretty_print(std::ostream& out, int indent) const {
  out << name() << "(";
  if (children_.empty()) {
    out << extra_repr() << ")";
    return;
  }
  const std::string pad(static_cast<size_t>(indent + 2), ' ');
  out << "\n";
  if (!extra_repr().empty()) out << pad << extra_repr() << "\n";
  for (const auto& [child_name, child] : children_) {
    out << pad << "(" << child_name << "): ";
    child->pretty_print(out, indent + 2);
    out << "\n";
  }
  out << std::string(static_cast<size_t>(indent), ' ') << ")";
}

std::ostream& operator<<(std::ostream& out, const Module& module) {
  module.pretty_print(out);
  return out;
}

}  // namespace flow::nn
