#pragma once
// Histories of views written in place (PyTorch's view + in-place rebase). A view made in grad
// mode remembers its base. When an op writes the view in place, the base gets a CopySlices node
// as its grad_fn: the gradient of the base's positions under the view goes to the writing op, the
// rest to the base's previous history. A view whose base's history changed after the view was
// made (a write through the base or another view) gets a fresh history read off the base.
#include <memory>

#include "autograd/node.h"

namespace flow::autograd {

// Marks `view` (the output of a view op on `input`) as a view of input's base.
void record_view(const Tensor& input, const Tensor& view);

// Remakes the history of a view whose base's history has changed since it was made.
void refresh_view_history(const Tensor& view);

// Gives the base of `view` the history of a write of the view by output `output_nr` of `writer`;
// returns the base's new grad_fn.
std::shared_ptr<Node> rebase_history(const Tensor& view, const std::string& op, const std::shared_ptr<Node>& writer, uint32_t output_nr);

// The base's gradient split in two: its positions under the view (which starts `offset` elements
// into the contiguous base) go to the node that wrote the view (edge 1), the rest, with zeros
// under the view, to the base's previous history (edge 0).
class CopySlices final : public Node {
 public:
  CopySlices(const Tensor& base, const Tensor& view, int64_t offset, Edge previous, Edge writer);
  std::string name() const override { return "CopySlices"; }
  TensorList apply(const TensorList& grad_outputs, bool retain_graph) override;
  size_t num_outputs() const override { return 1; }

 private:
  Shape base_shape_;
  TensorOptions options_;
  Shape size_;
  Strides stride_;
  int64_t offset_;
};

}  // namespace flow::autograd
