#pragma once
// Per-tensor autograd state. It lives in core because Tensor's accessors (requires_grad(),
// grad(), ...) and the interpreters need it; the grad-mode switch is core/grad_mode.h, the
// backward graph and the engine live in autograd/.
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace flow {
namespace autograd {
class Node;
}

struct AutogradMeta {
  bool requires_grad = false;
  bool retain_grad = false;
  Tensor grad;
  std::shared_ptr<autograd::Node> grad_fn;  // null for leaves
  uint32_t output_nr = 0;                   // which output of grad_fn this tensor is
  // A leaf's gradient sink, shared by every use of the leaf in a graph.
  std::weak_ptr<autograd::Node> grad_accumulator;
  // register_post_accumulate_grad_hook's hooks by id; AccumulateGrad runs them.
  std::vector<std::pair<uint64_t, std::function<void(Tensor&)>>> post_accumulate_grad_hooks;
  uint64_t next_hook_id = 0;
  // Set on views made while grad mode is on (PyTorch's differentiable views): the tensor whose
  // storage the view reads (never itself such a view), so that an in-place write through the
  // view gives the base a history (autograd's CopySlices), and the base's grad_fn the view's own
  // history was made from: when the base's history has changed since, the view's is remade.
  // Weak: the base's history can reach nodes that saved the view, and a base no one holds has
  // no history left to change or to be read.
  std::weak_ptr<TensorImpl> view_base;
  std::weak_ptr<autograd::Node> view_base_grad_fn;
};

// The live base a differentiable view reads (null for other tensors, and once the base is gone).
std::shared_ptr<TensorImpl> view_base(const Tensor& tensor);

// How many in-place writes the tensor's data has seen (its storage's, a global tensor's piece's;
// 0 for lazy tensors): autograd compares it to spot a saved value changed after saving.
uint64_t data_version(const Tensor& tensor);

}  // namespace flow
