#include "nn/utils/checkpoint.h"

#include <set>
#include <utility>

#include "autograd/engine.h"
#include "autograd/node.h"
#include "core/autocast.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "core/random.h"

namespace flow::utils {
namespace {

constexpr const char* kOp = "checkpoint";

struct RngState {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

RngState rng_state() {
  const Generator& generator = default_generator();
  return {generator.seed(), generator.offset()};
}

void set_rng_state(const RngState& state) {
  Generator& generator = default_generator();
  generator.manual_seed(state.seed);
  generator.set_offset(state.offset);
}

// Puts the generator back as it was, also when the rerun throws.
struct RngRestore {
  RngState saved = rng_state();
  ~RngRestore() { set_rng_state(saved); }
};

// The autocast state of both device types at the first run: backward runs with autocast off, and
// the rerun must choose the dtypes the first run chose.
struct AutocastStates {
  bool cpu_enabled = is_autocast_enabled(DeviceType::kCPU);
  DType cpu_dtype = autocast_dtype(DeviceType::kCPU);
  bool cuda_enabled = is_autocast_enabled(DeviceType::kCUDA);
  DType cuda_dtype = autocast_dtype(DeviceType::kCUDA);
};

class CheckpointNode final : public autograd::Node {
 public:
  CheckpointNode(CheckpointFunction function, const TensorList& inputs, TensorList leaves, const TensorList& outputs,
                 bool preserve_rng_state, RngState rng)
      : function_(std::move(function)), inputs_(inputs), leaves_(std::move(leaves)), preserve_rng_state_(preserve_rng_state), rng_(rng) {
    for (const Tensor& input : inputs_) {
      next_edges_.push_back(autograd::gradient_edge(input));
      versions_.push_back(input.defined() ? data_version(input) : 0);
    }
    for (const Tensor& leaf : leaves_) next_edges_.push_back(autograd::gradient_edge(leaf));
    for (const Tensor& output : outputs) output_metas_.push_back(output.defined() ? TensorMeta{output.shape(), output.dtype(), output.device()} : TensorMeta{});
  }

  std::string name() const override { return "CheckpointBackward"; }
  size_t num_outputs() const override { return output_metas_.size(); }

  TensorList apply(const TensorList& grad_outputs, bool retain_graph) override {
    if (released_) {
      fail(kOp, "trying to backward through a checkpointed function a second time; its inputs were freed by the first "
                "backward, pass retain_graph=true to it if you need to backward again");
    }
    if (is_grad_enabled()) fail(kOp, "backward with create_graph (higher-order gradients) through a checkpoint is not supported");
    // The rerun reads the inputs afresh: a change in place since the first run would give other values.
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (inputs_[i].defined() && data_version(inputs_[i]) != versions_[i]) {
        fail(kOp, "input ", i, " (shape ", inputs_[i].shape(), ") was modified in place after the checkpointed call");
      }
    }
    // The rerun's inputs are new leaves, so that its backward stops at them and hands their
    // gradients to this node's edges.
    TensorList rerun_inputs;
    for (const Tensor& input : inputs_) {
      if (!input.defined()) {
        rerun_inputs.emplace_back();
        continue;
      }
      Tensor leaf = input.detach();
      if (input.requires_grad()) leaf.requires_grad_(true);
      rerun_inputs.push_back(leaf);
    }
    TensorList outputs;
    {
      RngRestore restore;
      if (preserve_rng_state_) set_rng_state(rng_);
      autograd::GradModeGuard grad(true);
      const autocast cpu(DeviceType::kCPU, autocast_.cpu_dtype, autocast_.cpu_enabled);
      const autocast cuda(DeviceType::kCUDA, autocast_.cuda_dtype, autocast_.cuda_enabled);
      outputs = function_(rerun_inputs);
    }
    check_same_outputs(outputs);
    TensorList roots, root_grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (!outputs[i].defined() || !outputs[i].requires_grad() || !grad_outputs[i].defined()) continue;
      roots.push_back(outputs[i]);
      root_grads.push_back(grad_outputs[i]);
    }
    TensorList wrt;
    std::vector<size_t> edge_of;
    for (size_t i = 0; i < next_edges_.size(); ++i) {
      if (!next_edges_[i].valid()) continue;
      wrt.push_back(i < rerun_inputs.size() ? rerun_inputs[i] : leaves_[i - rerun_inputs.size()]);
      edge_of.push_back(i);
    }
    TensorList grads(next_edges_.size());
    if (!roots.empty()) {
      const TensorList found = autograd::grad(roots, wrt, root_grads, /*retain_graph=*/false, /*create_graph=*/false, /*allow_unused=*/true);
      for (size_t j = 0; j < found.size(); ++j) grads[edge_of[j]] = found[j];
    }
    if (!retain_graph) {
      inputs_.clear();
      released_ = true;
    }
    return grads;
  }

 private:
  void check_same_outputs(const TensorList& outputs) const {
    if (outputs.size() != output_metas_.size()) {
      fail(kOp, "the function returned ", outputs.size(), " tensors when rerun for backward but ", output_metas_.size(),
           " the first time; it must compute the same outputs both times");
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      const TensorMeta rerun = outputs[i].defined() ? TensorMeta{outputs[i].shape(), outputs[i].dtype(), outputs[i].device()} : TensorMeta{};
      if (!(rerun.shape == output_metas_[i].shape) || rerun.dtype != output_metas_[i].dtype) {
        fail(kOp, "output ", i, " has shape ", rerun.shape, " when rerun for backward but ", output_metas_[i].shape,
             " the first time; the function must compute the same outputs both times");
      }
    }
  }

  CheckpointFunction function_;
  TensorList inputs_;
  std::vector<uint64_t> versions_;
  TensorList leaves_;  // parameters the function reads (edges after the inputs')
  std::vector<TensorMeta> output_metas_;
  bool preserve_rng_state_;
  RngState rng_;
  AutocastStates autocast_;
  bool released_ = false;
};

}  // namespace

TensorList checkpoint(const CheckpointFunction& function, const TensorList& inputs, bool preserve_rng_state) {
  if (!function) fail(kOp, "got an empty function");
  bool lazy = false;
  for (const Tensor& input : inputs) {
    if (!input.defined()) continue;
    if (input.is_global()) fail(kOp, "global tensors are not supported (input of shape ", input.shape(), ")");
    lazy = lazy || input.is_lazy();
  }
  if (lazy || !is_grad_enabled()) return function(inputs);
  const RngState rng = rng_state();
  std::set<const TensorImpl*> seen;
  TensorList read;  // what the function's ops read that requires grad, in first-read order
  TensorList outputs;
  {
    autograd::NoGradGuard no_grad;
    autograd::GradInputObserverGuard observer([&](const Tensor& t) {
      if (seen.insert(t.impl()).second) read.push_back(t);
    });
    outputs = function(inputs);
  }
  // A tensor returned as is (a parameter, say) is read too: its gradient flows through the node.
  for (const Tensor& output : outputs) {
    if (output.defined() && output.requires_grad() && seen.insert(output.impl()).second) read.push_back(output);
  }
  std::set<const TensorImpl*> input_impls;
  bool any_requires_grad = false;
  for (const Tensor& input : inputs) {
    if (!input.defined()) continue;
    input_impls.insert(input.impl());
    any_requires_grad = any_requires_grad || input.requires_grad();
  }
  TensorList leaves;
  for (const Tensor& t : read) {
    if (input_impls.count(t.impl())) continue;
    if (!t.is_leaf()) {
      fail(kOp, "the function reads a tensor of shape ", t.shape(), " that requires grad and has a history but is not one of "
                "its inputs; pass it as an input so that its gradient can flow");
    }
    leaves.push_back(t);
  }
  if (!any_requires_grad && leaves.empty()) return outputs;  // nothing to differentiate
  for (Tensor& output : outputs) {
    // A tensor returned as is gets the node on an alias, not on the tensor itself.
    if (output.defined() && (input_impls.count(output.impl()) || output.requires_grad())) output = output.detach();
  }
  auto node = std::make_shared<CheckpointNode>(function, inputs, std::move(leaves), outputs, preserve_rng_state, rng);
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].defined() || !is_floating(outputs[i].dtype())) continue;
    auto meta = std::make_shared<AutogradMeta>();
    meta->requires_grad = true;
    meta->grad_fn = node;
    meta->output_nr = static_cast<uint32_t>(i);
    outputs[i].impl()->autograd = std::move(meta);
  }
  return outputs;
}

Tensor checkpoint(nn::Module& module, const Tensor& input, bool preserve_rng_state) {
  // The backward node keeps the module alive when a shared_ptr owns it.
  std::shared_ptr<nn::Module> owner = module.weak_from_this().lock();
  const TensorList outputs = checkpoint([owner, &module](const TensorList& in) { return TensorList{module(in.at(0))}; }, {input},
                                        preserve_rng_state);
  return outputs.at(0);
}

}  // namespace flow::utils
