// The backward engine: counts, for every node reachable from the roots, how many gradients it
// will receive, then runs nodes once all their gradients have arrived (later-recorded nodes
// first), summing gradients that reach the same node output.
#include "autograd/engine.h"

#include <glog/logging.h>

#include <queue>
#include <unordered_map>

#include "autograd/node.h"
#include "core/autocast.h"
#include "core/grad_mode.h"
#include "core/ops/all.h"

namespace flow::autograd {
namespace {

thread_local int backward_depth = 0;
thread_local Tensor loss_scale;

// Gradients are computed in the dtypes the forward chose: autocast is off while they are.
struct BackwardScope {
  BackwardScope() { ++backward_depth; }
  ~BackwardScope() { --backward_depth; }
  BackwardScope(const BackwardScope&) = delete;
  BackwardScope& operator=(const BackwardScope&) = delete;
  autocast no_autocast{kBFloat16, false};
};

struct NodeOrder {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

struct Capture {
  Edge edge;
  Tensor grad;
};

void accumulate(Tensor& slot, const Tensor& grad) {
  if (!grad.defined()) return;
  slot = slot.defined() ? slot + grad : grad;
}

void retain_grads(Node& node, const TensorList& grads) {
  auto& retained = node.retained_outputs();
  for (size_t i = 0; i < retained.size() && i < grads.size(); ++i) {
    auto impl = retained[i].lock();
    if (!impl || !grads[i].defined()) continue;
    Tensor tensor(impl);
    Tensor g = is_grad_enabled() ? grads[i] : grads[i].detach();
    tensor.set_grad(tensor.grad().defined() ? tensor.grad() + g : g.clone());
  }
}

// Runs the graph below `roots`. With captures, gradients reaching those edges are stored there
// and leaves' grad() is left alone (autograd::grad); otherwise leaves accumulate (backward).
void run_backward(const TensorList& roots, const TensorList& root_grads, bool retain_graph, bool create_graph,
                  std::vector<Capture>* captures) {
  const BackwardScope backward_scope;
  GradModeGuard grad_mode(create_graph);
  std::unordered_map<Node*, int> dependencies;
  std::unordered_map<Node*, TensorList> buffers;
  std::vector<std::shared_ptr<Node>> keep_alive;

  std::vector<Node*> stack;
  auto visit = [&](const std::shared_ptr<Node>& node) {
    if (dependencies.emplace(node.get(), 0).second) {
      keep_alive.push_back(node);
      stack.push_back(node.get());
    }
  };
  for (const Tensor& root : roots) visit(gradient_edge(root).node);
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& edge : node->next_edges()) {
      if (!edge.valid()) continue;
      visit(edge.node);
      ++dependencies[edge.node.get()];
    }
  }

  auto buffer_of = [&](Node* node) -> TensorList& {
    TensorList& buffer = buffers[node];
    if (buffer.empty()) buffer.resize(node->num_outputs());
    return buffer;
  };
  for (size_t i = 0; i < roots.size(); ++i) {
    const Edge edge = gradient_edge(roots[i]);
    accumulate(buffer_of(edge.node.get())[edge.input_nr], root_grads[i]);
  }

  std::priority_queue<Node*, std::vector<Node*>, NodeOrder> ready;
  for (const auto& [node, count] : dependencies) {
    if (count == 0) ready.push(node);
  }
  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    TensorList grads = std::move(buffer_of(node));
    buffers.erase(node);
    if (captures != nullptr) {
      for (Capture& capture : *captures) {
        if (capture.edge.node.get() == node) capture.grad = grads[capture.edge.input_nr];
      }
    }
    retain_grads(*node, grads);
    const bool is_leaf_sink = dynamic_cast<AccumulateGrad*>(node) != nullptr;
    TensorList input_grads;
    if (!(is_leaf_sink && captures != nullptr)) input_grads = node->apply(grads, retain_graph);
    const auto& edges = node->next_edges();
    for (size_t i = 0; i < edges.size(); ++i) {
      if (!edges[i].valid()) continue;
      if (i < input_grads.size()) accumulate(buffer_of(edges[i].node.get())[edges[i].input_nr], input_grads[i]);
      if (--dependencies[edges[i].node.get()] == 0) ready.push(edges[i].node.get());
    }
  }
}

TensorList root_gradients(const TensorList& outputs, const TensorList& grad_outputs, const char* op, const Tensor& seed_scale = Tensor()) {
  if (!grad_outputs.empty() && grad_outputs.size() != outputs.size()) {
    fail(op, "got ", grad_outputs.size(), " gradients for ", outputs.size(), " outputs");
  }
  TensorList grads;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& output = outputs[i];
    if (!output.requires_grad()) {
      fail(op, "element ", i, " of tensors does not require grad and does not have a grad_fn");
    }
    if (!grad_outputs.empty() && grad_outputs[i].defined()) {
      if (!(grad_outputs[i].shape() == output.shape())) {
        fail(op, "mismatch in shape: grad_output[", i, "] has a shape of ", grad_outputs[i].shape(),
             " and output[", i, "] has a shape of ", output.shape());
      }
      grads.push_back(grad_outputs[i]);
    } else {
      if (output.numel() != 1) {
        fail(op, "grad can be implicitly created only for scalar outputs; output ", i, " has shape ", output.shape(),
             ", pass a gradient of that shape");
      }
      grads.push_back(seed_scale.defined() ? ones_like(output) * seed_scale.to(output.dtype()) : ones_like(output));
    }
  }
  return grads;
}

}  // namespace

void backward(const TensorList& outputs, const TensorList& grad_outputs, bool retain_graph, bool create_graph) {
  const TensorList grads = root_gradients(outputs, grad_outputs, "backward", loss_scale);
  run_backward(outputs, grads, retain_graph || create_graph, create_graph, nullptr);
}

LossScaleGuard::LossScaleGuard(Tensor scale) : previous_(std::move(loss_scale)) {
  CHECK(scale.defined() && scale.numel() == 1) << "a loss scale is one element";
  loss_scale = std::move(scale);
}

LossScaleGuard::~LossScaleGuard() { loss_scale = std::move(previous_); }

TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs,
                bool retain_graph, bool create_graph, bool allow_unused) {
  const TensorList grads = root_gradients(outputs, grad_outputs, "grad");
  std::vector<Capture> captures;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) fail("grad", "input ", i, " does not require grad");
    captures.push_back({gradient_edge(inputs[i]), Tensor()});
  }
  run_backward(outputs, grads, retain_graph || create_graph, create_graph, &captures);
  TensorList result;
  for (size_t i = 0; i < captures.size(); ++i) {
    if (!captures[i].grad.defined() && !allow_unused) {
      fail("grad", "input ", i, " was not used in the graph of the outputs; pass allow_unused=true if this is "
           "expected");
    }
    result.push_back(captures[i].grad);
  }
  return result;
}

bool is_running_backward() { return backward_depth > 0; }

}  // namespace flow::autograd

namespace flow {

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  autograd::backward({*this}, gradient.defined() ? TensorList{gradient} : TensorList{}, retain_graph, create_graph);
}

void Tensor::retain_grad() {
  if (!requires_grad()) fail("retain_grad", "can't retain_grad on a tensor that doesn't require gradients");
  if (is_leaf()) return;  // leaves keep their gradient anyway
  AutogradMeta& meta = *impl()->autograd;
  meta.retain_grad = true;
  auto& retained = meta.grad_fn->retained_outputs();
  if (retained.size() <= meta.output_nr) retained.resize(meta.output_nr + 1);
  retained[meta.output_nr] = impl_ptr();
}

}  // namespace flow
