#include "autograd/node.h"

#include <glog/logging.h>

#include <atomic>

#include "autograd/view_history.h"
#include "core/grad_mode.h"
#include "core/ops/all.h"

namespace flow::autograd {
namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};

class SavedContext final : public VjpContext {
 public:
  SavedContext(const TensorList& grads, const Attrs& attrs, std::vector<bool> needs, const std::string& op,
               std::shared_ptr<Node> owner, const std::vector<SavedTensor>& inputs,
               const std::vector<SavedTensor>& outputs, const std::vector<TensorMeta>& input_metas)
      : VjpContext(grads, attrs, std::move(needs)),
        op_(op),
        owner_(std::move(owner)),
        inputs_(inputs),
        outputs_(outputs),
        input_metas_(input_metas) {}
  Tensor input(size_t i) const override { return inputs_.at(i).unpack(owner_, op_, "input", i); }
  Tensor output(size_t i) const override { return outputs_.at(i).unpack(owner_, op_, "output", i); }
  const TensorMeta& input_meta(size_t i) const override { return input_metas_.at(i); }

 private:
  const std::string& op_;
  // Held by value: the caller passes the temporary shared_from_this().
  std::shared_ptr<Node> owner_;
  const std::vector<SavedTensor>& inputs_;
  const std::vector<SavedTensor>& outputs_;
  const std::vector<TensorMeta>& input_metas_;
};

const char* kFreedGraphMessage =
    "trying to backward through the graph a second time (or to access saved tensors after they were freed). Saved "
    "values are freed when you call backward() or autograd::grad(); pass retain_graph=true to the first call if you "
    "need to backward through the graph again";
}  // namespace

SavedTensor::SavedTensor(const Tensor& tensor, bool written_in_place) : is_output_(written_in_place) {
  if (!tensor.defined()) return;
  was_defined_ = true;
  data_ = written_in_place ? tensor.detach() : tensor;
  version_ = data_version(tensor);
}

SavedTensor::SavedTensor(const Tensor& tensor, uint32_t output_nr) : is_output_(true), output_nr_(output_nr) {
  if (!tensor.defined()) return;
  was_defined_ = true;
  // The recorder makes every floating output of the node require grad (after this is saved).
  requires_grad_ = is_floating(tensor.dtype());
  data_ = tensor.detach();
  version_ = data_version(tensor);
}

SavedTensor SavedTensor::not_saved() {
  SavedTensor saved;
  saved.not_saved_ = true;
  return saved;
}

Tensor SavedTensor::unpack(const std::shared_ptr<Node>& owner, const std::string& op, const char* role,
                           size_t index) const {
  CHECK(!not_saved_) << op << "'s vjp reads " << role << " " << index << ", which the op's profile_cost does not list as saved";
  if (!was_defined_) return Tensor();
  if (!data_.defined()) fail(op, kFreedGraphMessage);
  if (data_version(data_) != version_) {
    fail(op, "one of the values needed for gradient computation has been modified by an in-place operation: ", role,
         " ", index, " of ", op, " (shape ", data_.shape(), ") is at version ", data_version(data_),
         "; expected version ", version_, " instead");
  }
  if (!is_output_) return data_;
  Tensor result = data_.detach();
  if (requires_grad_) {
    auto meta = std::make_shared<AutogradMeta>();
    meta->requires_grad = true;
    meta->grad_fn = owner;
    meta->output_nr = output_nr_;
    result.impl()->autograd = std::move(meta);
  }
  return result;
}

Node::Node() : sequence_nr_(g_next_sequence_nr.fetch_add(1)) {}

OpNode::OpNode(const OpDef& op, const TensorList& inputs, const TensorList& outputs, const Attrs& attrs)
    : op_(op), attrs_(attrs) {
  // A view op's input is saved without its history (its vjp reads metas only): once the view is
  // written in place, the base's history reaches this node through CopySlices, and a saved base
  // with its history would hold itself alive.
  const bool makes_view = op.view && !op.inplace;
  for (const Tensor& input : inputs) input_metas_.push_back({input.shape(), input.dtype(), input.device()});
  for (const Tensor& output : outputs) output_metas_.push_back({output.shape(), output.dtype(), output.device()});
  // An op whose profile_cost lists what its vjp reads keeps only those (PyTorch's saved tensors):
  // an activation no vjp reads is freed as soon as the forward is done with it.
  std::vector<bool> keep_input(inputs.size(), !op.profile_cost), keep_output(outputs.size(), !op.profile_cost);
  if (op.profile_cost) {
    const ProfileCost cost = op.profile_cost(input_metas_, output_metas_, attrs);
    for (size_t i : cost.saved_inputs) keep_input.at(i) = true;
    for (size_t i : cost.saved_outputs) keep_output.at(i) = true;
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& input = inputs[i];
    next_edges_.push_back(gradient_edge(input));
    bool written_in_place = false;
    for (const Tensor& output : outputs) written_in_place |= output.same(input);
    saved_inputs_.push_back(keep_input[i] ? SavedTensor(makes_view && input.defined() ? input.detach() : input, written_in_place)
                                          : SavedTensor::not_saved());
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    zero_grad_options_.push_back(options_beside(outputs[i]));
    saved_outputs_.push_back(keep_output[i] ? SavedTensor(outputs[i], static_cast<uint32_t>(i)) : SavedTensor::not_saved());
  }
}

TensorList OpNode::apply(const TensorList& grad_outputs, bool retain_graph) {
  if (released_) fail(op_.name, kFreedGraphMessage);
  if (!op_.vjp) fail(op_.name, "the op has no gradient formula, so gradients cannot flow through it");
  TensorList grads = grad_outputs;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined() && is_floating(output_metas_[i].dtype)) {
      grads[i] = zeros(output_metas_[i].shape, zero_grad_options_[i]);
    }
  }
  std::vector<bool> needs;
  for (const Edge& edge : next_edges_) needs.push_back(edge.valid());
  SavedContext ctx(grads, attrs_, needs, op_.name, shared_from_this(), saved_inputs_, saved_outputs_, input_metas_);
  TensorList input_grads = op_.vjp(ctx);
  CHECK_EQ(input_grads.size(), next_edges_.size()) << op_.name << " vjp returned the wrong number of gradients";
  for (size_t i = 0; i < input_grads.size(); ++i) {
    if (!input_grads[i].defined() || !needs[i]) continue;
    CHECK(input_grads[i].shape() == input_metas_[i].shape)
        << op_.name << " vjp gave gradient " << input_grads[i].shape() << " for input " << i << " of shape "
        << input_metas_[i].shape;
  }
  if (!retain_graph) {
    for (auto& saved : saved_inputs_) saved.release();
    for (auto& saved : saved_outputs_) saved.release();
    released_ = true;
  }
  return input_grads;
}

AccumulateGrad::AccumulateGrad(const Tensor& leaf) : leaf_(leaf.impl_ptr()) {}

Tensor AccumulateGrad::leaf() const {
  auto impl = leaf_.lock();
  return impl ? Tensor(impl) : Tensor();
}

TensorList AccumulateGrad::apply(const TensorList& grad_outputs, bool) {
  Tensor leaf_tensor = leaf();
  const Tensor& incoming = grad_outputs.at(0);
  if (!leaf_tensor.defined() || !incoming.defined()) return {};
  // Users modify grad() in place (zero_()), so it must not alias anything else: a gradient held
  // only by the engine's buffer is taken as is, anything shared is copied.
  const bool exclusive = !incoming.is_lazy() && incoming.impl_ptr().use_count() == 1 && incoming.storage().use_count() == 1;
  // Without create_graph the stored gradient must not keep the backward graph alive.
  Tensor g = is_grad_enabled() ? incoming : incoming.detach();
  Tensor current = leaf_tensor.grad();
  if (!current.defined()) {
    leaf_tensor.set_grad(exclusive ? g : g.clone());
  } else {
    leaf_tensor.set_grad(current + g);
  }
  // A copy: a hook may remove itself (or others) while running.
  const auto hooks = leaf_tensor.impl()->autograd->post_accumulate_grad_hooks;
  for (const auto& entry : hooks) entry.second(leaf_tensor);
  return {};
}

Edge gradient_edge(const Tensor& tensor) {
  if (!tensor.defined() || !tensor.requires_grad()) return {};
  refresh_view_history(tensor);
  AutogradMeta& meta = *tensor.impl()->autograd;
  if (meta.grad_fn) return {meta.grad_fn, meta.output_nr};
  auto accumulator = meta.grad_accumulator.lock();
  if (!accumulator) {
    accumulator = std::make_shared<AccumulateGrad>(tensor);
    meta.grad_accumulator = accumulator;
  }
  return {accumulator, 0};
}

}  // namespace flow::autograd
