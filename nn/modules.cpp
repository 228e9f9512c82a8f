#include "nn/modules.h"

#include <cmath>
#include <sstream>

#include "nn/init.h"

namespace flow::nn {
namespace {
std::string format_double(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}
// A double as Python prints a float: integral values keep a ".0" (PyTorch's float defaults print so).
std::string python_float(double value) {
  const std::string text = format_double(value);
  return text.find_first_of(".ein") == std::string::npos ? text + ".0" : text;
}
}  // namespace

Linear::Linear(const LinearOptions& options) : options_(options) {
  FLOW_ARG_CHECK(options.in_features_ >= 0 && options.out_features_ >= 0, "Linear", "features must be non-negative, got ",
                 options.in_features_, " and ", options.out_features_);
  weight = register_parameter("weight", empty({options.out_features_, options.in_features_}));
  if (options.bias_) bias = register_parameter("bias", empty({options.out_features_}));
  reset_parameters();
}

void Linear::reset_parameters() {
  // kaiming_uniform_(a=sqrt(5)) gives bound 1/sqrt(fan_in), the same as the bias's.
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = options_.in_features_ > 0 ? 1.0 / std::sqrt(static_cast<double>(options_.in_features_)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

std::string Linear::extra_repr() const {
  return "in_features=" + std::to_string(options_.in_features_) + ", out_features=" + std::to_string(options_.out_features_) +
         ", bias=" + (options_.bias_ ? "True" : "False");
}

Tensor Linear::forward(const Tensor& input) { return linear(input, weight, bias); }

std::string Flatten::extra_repr() const {
  return "start_dim=" + std::to_string(start_dim_) + ", end_dim=" + std::to_string(end_dim_);
}

Dropout::Dropout(double p) : p_(p) {
  FLOW_ARG_CHECK(p >= 0 && p <= 1, "Dropout", "probability has to be between 0 and 1, but got ", p);
}
std::string Dropout::extra_repr() const { return "p=" + format_double(p_) + ", inplace=False"; }

std::string LeakyReLU::extra_repr() const { return "negative_slope=" + format_double(negative_slope_); }

std::string Softplus::extra_repr() const { return "beta=" + python_float(beta_) + ", threshold=" + python_float(threshold_); }

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (const auto& child : children()) x = (*child)(x);
  return x;
}

void Sequential::push_back(std::shared_ptr<Module> module) { register_module(std::to_string(size()), std::move(module)); }

std::shared_ptr<Module> Sequential::operator[](size_t index) const {
  if (index >= size()) fail("Sequential", "index ", index, " is out of range for ", size(), " modules");
  return children()[index];
}

void ModuleList::push_back(std::shared_ptr<Module> module) { register_module(std::to_string(size()), std::move(module)); }

std::shared_ptr<Module> ModuleList::operator[](size_t index) const {
  if (index >= size()) fail("ModuleList", "index ", index, " is out of range for ", size(), " modules");
  return children()[index];
}

bool ModuleDict::contains(const std::string& key) const {
  for (const auto& [name, child] : named_children()) {
    if (name == key) return true;
  }
  return false;
}

std::shared_ptr<Module> ModuleDict::operator[](const std::string& key) const {
  for (const auto& [name, child] : named_children()) {
    if (name == key) return child;
  }
  fail("ModuleDict", "no module named '", key, "'");
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> names;
  for (const auto& [name, child] : named_children()) names.push_back(name);
  return names;
}

}  // namespace flow::nn
