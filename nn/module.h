#pragma once
// nn::Module: the base of every layer and model, with PyTorch's registration, traversal,
// state_dict, train/eval, device/dtype moves and printing.
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "core/serialization.h"
#include "core/tensor.h"

namespace flow::nn {

class Module : public std::enable_shared_from_this<Module> {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The class name shown when printing ("Linear"); subclasses override it.
  virtual std::string name() const { return "Module"; }
  // The part inside the parentheses when printing ("in_features=784, out_features=512, bias=True").
  virtual std::string extra_repr() const { return ""; }
  // Single-tensor forward, used by Sequential and operator(); modules with other signatures
  // define their own forward overloads.
  virtual Tensor forward(const Tensor& input);
  // forward(input), seen by the thread's ModuleCallObserver (a Graph names traced ops by it).
  Tensor operator()(const Tensor& input);

  // Registration. Names must be unique and may not contain '.'.
  Tensor& register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  Tensor& register_buffer(const std::string& name, Tensor tensor);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

  // Traversal, in registration order; nested names are joined with '.'.
  TensorList parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  TensorList buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  // This module (named prefix) and every descendant.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules(const std::string& prefix = "");
  std::vector<std::shared_ptr<Module>> modules();

  // Parameters and buffers by qualified name ("linear_relu_stack.0.weight").
  StateDict state_dict() const;
  // Copies values into the existing tensors (no reallocation, so optimizers keep working).
  // strict: missing or unexpected keys are an error; shape mismatches always are.
  void load_state_dict(const StateDict& state, bool strict = true);

  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Moves/casts every parameter and buffer in place: existing Tensor handles see the change.
  void to(Device device);
  void to(DType dtype);
  // Makes every parameter and buffer a global tensor on `placement` (OneFlow's
  // module.to_global): each rank's tensor is taken as the whole logical tensor (the same on
  // every rank after manual_seed and the same initialisation) and cut to `sbp`. sbp_of gives
  // some tensors their own sbp, by state name ("0.weight"), e.g. for Megatron-style layers.
  // Existing Tensor handles (an optimizer's parameter list) see the change.
  void to_global(const Placement& placement, const NdSbp& sbp, const std::map<std::string, NdSbp>& sbp_of = {});
  // Resets gradients of all parameters (to undefined, or to zeros with set_to_none=false).
  void zero_grad(bool set_to_none = true);

  void pretty_print(std::ostream& out, int indent = 0) const;

 protected:
  // Writes `value`'s data into `target`'s impl, keeping target's handle and autograd identity.
  static void replace_data(Tensor& target, const Tensor& value);

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void check_new_name(const std::string& name, const char* kind) const;

  std::vector<std::pair<std::string, Tensor>> parameters_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

std::ostream& operator<<(std::ostream& out, const Module& module);

// Observes Module::operator() calls on the thread that installs it: a Graph tracing build() uses
// it to give ops their module scope and to record each module's input and output metas.
class ModuleCallObserver {
 public:
  virtual ~ModuleCallObserver() = default;
  virtual void enter(const Module& module, const Tensor& input) = 0;
  virtual void exit(const Module& module, const Tensor& output) = 0;
};
// Installs observer for this thread (nullptr removes it); returns the previous one.
ModuleCallObserver* set_module_call_observer(ModuleCallObserver* observer);

}  // namespace flow::nn
