#pragma once
// The layers of nn with PyTorch's constructor options, default initialisation and printing.
#include <memory>
#include <vector>

#include "nn/functional.h"
#include "nn/module.h"

namespace flow::nn {

struct LinearOptions {
  LinearOptions(int64_t in_features, int64_t out_features) : in_features_(in_features), out_features_(out_features) {}
  LinearOptions& bias(bool bias) { bias_ = bias; return *this; }
  int64_t in_features_, out_features_;
  bool bias_ = true;
};

// y = x W^T + b; W and b start uniform in +-1/sqrt(in_features), as in PyTorch.
class Linear : public Module {
 public:
  explicit Linear(const LinearOptions& options);
  Linear(int64_t in_features, int64_t out_features, bool bias = true) : Linear(LinearOptions(in_features, out_features).bias(bias)) {}
  std::string name() const override { return "Linear"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;
  void reset_parameters();
  Tensor weight, bias;

 private:
  LinearOptions options_;
};

class Identity : public Module {
 public:
  std::string name() const override { return "Identity"; }
  Tensor forward(const Tensor& input) override { return input; }
};

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim_(start_dim), end_dim_(end_dim) {}
  std::string name() const override { return "Flatten"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override { return input.flatten(start_dim_, end_dim_); }

 private:
  int64_t start_dim_, end_dim_;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  std::string name() const override { return "Dropout"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override { return functional::dropout(input, p_, is_training()); }
  double p() const { return p_; }

 private:
  double p_;
};

// Activations without state.
#define FLOW_ACTIVATION(Name, expression)                                   \
  class Name : public Module {                                              \
   public:                                                                  \
    std::string name() const override { return #Name; }                    \
    Tensor forward(const Tensor& input) override { return expression; }     \
  };
FLOW_ACTIVATION(ReLU, relu(input))
FLOW_ACTIVATION(ReLU6, functional::relu6(input))
FLOW_ACTIVATION(SiLU, silu(input))
FLOW_ACTIVATION(Sigmoid, sigmoid(input))
FLOW_ACTIVATION(Tanh, flow::tanh(input))
#undef FLOW_ACTIVATION

class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope_(negative_slope) {}
  std::string name() const override { return "LeakyReLU"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override { return functional::leaky_relu(input, negative_slope_); }

 private:
  double negative_slope_;
};

// log(1 + exp(beta * x)) / beta, linear where beta * x > threshold.
class Softplus : public Module {
 public:
  explicit Softplus(double beta = 1.0, double threshold = 20.0) : beta_(beta), threshold_(threshold) {}
  std::string name() const override { return "Softplus"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override { return softplus(input, beta_, threshold_); }

 private:
  double beta_, threshold_;
};

class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none") : approximate_(std::move(approximate)) {}
  std::string name() const override { return "GELU"; }
  std::string extra_repr() const override { return "approximate='" + approximate_ + "'"; }
  Tensor forward(const Tensor& input) override { return gelu(input, approximate_); }

 private:
  std::string approximate_;
};

class Softmax : public Module {
 public:
  explicit Softmax(int64_t dim) : dim_(dim) {}
  std::string name() const override { return "Softmax"; }
  std::string extra_repr() const override { return "dim=" + std::to_string(dim_); }
  Tensor forward(const Tensor& input) override { return softmax(input, dim_); }

 private:
  int64_t dim_;
};

class LogSoftmax : public Module {
 public:
  explicit LogSoftmax(int64_t dim) : dim_(dim) {}
  std::string name() const override { return "LogSoftmax"; }
  std::string extra_repr() const override { return "dim=" + std::to_string(dim_); }
  Tensor forward(const Tensor& input) override { return log_softmax(input, dim_); }

 private:
  int64_t dim_;
};

// Children named 0, 1, ...; forward feeds each one's output to the next.
class Sequential : public Module {
 public:
  Sequential() = default;
  template <typename... Modules>
  explicit Sequential(std::shared_ptr<Modules>... modules) {
    (push_back(std::move(modules)), ...);
  }
  std::string name() const override { return "Sequential"; }
  Tensor forward(const Tensor& input) override;
  void push_back(std::shared_ptr<Module> module);
  size_t size() const { return children().size(); }
  std::shared_ptr<Module> operator[](size_t index) const;
};

// Holds modules as children named 0, 1, ... without a forward of its own.
class ModuleList : public Module {
 public:
  std::string name() const override { return "ModuleList"; }
  void push_back(std::shared_ptr<Module> module);
  size_t size() const { return children().size(); }
  std::shared_ptr<Module> operator[](size_t index) const;
};

// Holds modules under string keys, in insertion order, as children of that name.
class ModuleDict : public Module {
 public:
  ModuleDict() = default;
  explicit ModuleDict(const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& modules) {
    for (const auto& [key, module] : modules) insert(key, module);
  }
  std::string name() const override { return "ModuleDict"; }
  void insert(const std::string& key, std::shared_ptr<Module> module) { register_module(key, std::move(module)); }
  bool contains(const std::string& key) const;
  std::shared_ptr<Module> operator[](const std::string& key) const;
  std::vector<std::string> keys() const;
  size_t size() const { return children().size(); }
};

// Losses as modules (reduction "mean" by default, like PyTorch).
class CrossEntropyLoss : public Module {
 public:
  explicit CrossEntropyLoss(functional::CrossEntropyLossOptions options = {}) : options_(options) {}
  std::string name() const override { return "CrossEntropyLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) { return functional::cross_entropy(input, target, options_); }
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }

 private:
  functional::CrossEntropyLossOptions options_;
};

class NLLLoss : public Module {
 public:
  explicit NLLLoss(functional::NLLLossOptions options = {}) : options_(options) {}
  std::string name() const override { return "NLLLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) { return functional::nll_loss(input, target, options_); }
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }

 private:
  functional::NLLLossOptions options_;
};

class MSELoss : public Module {
 public:
  explicit MSELoss(functional::Reduction reduction = functional::Reduction::kMean) : reduction_(reduction) {}
  std::string name() const override { return "MSELoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) { return functional::mse_loss(input, target, reduction_); }
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }

 private:
  functional::Reduction reduction_;
};

class L1Loss : public Module {
 public:
  explicit L1Loss(functional::Reduction reduction = functional::Reduction::kMean) : reduction_(reduction) {}
  std::string name() const override { return "L1Loss"; }
  Tensor forward(const Tensor& input, const Tensor& target) { return functional::l1_loss(input, target, reduction_); }
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }

 private:
  functional::Reduction reduction_;
};

class SmoothL1Loss : public Module {
 public:
  explicit SmoothL1Loss(functional::Reduction reduction = functional::Reduction::kMean, double beta = 1.0)
      : reduction_(reduction), beta_(beta) {}
  std::string name() const override { return "SmoothL1Loss"; }
  Tensor forward(const Tensor& input, const Tensor& target) { return functional::smooth_l1_loss(input, target, reduction_, beta_); }
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }

 private:
  functional::Reduction reduction_;
  double beta_;
};

class BCELoss : public Module {
 public:
  explicit BCELoss(functional::Reduction reduction = functional::Reduction::kMean) : reduction_(reduction) {}
  std::string name() const override { return "BCELoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) { return functional::binary_cross_entropy(input, target, reduction_); }
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }

 private:
  functional::Reduction reduction_;
};

class BCEWithLogitsLoss : public Module {
 public:
  explicit BCEWithLogitsLoss(functional::Reduction reduction = functional::Reduction::kMean) : reduction_(reduction) {}
  std::string name() const override { return "BCEWithLogitsLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) {
    return functional::binary_cross_entropy_with_logits(input, target, reduction_);
  }
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }

 private:
  functional::Reduction reduction_;
};

}  // namespace flow::nn
