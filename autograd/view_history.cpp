#include "autograd/view_history.h"

#include "core/ops/copy.h"
#include "core/ops/strided.h"

namespace flow::autograd {
namespace {

bool same_node(const std::weak_ptr<Node>& a, const std::shared_ptr<Node>& b) { return !a.owner_before(b) && !b.owner_before(a); }

// The view's elements as offsets into its base, which must be contiguous (a base is never a view
// made in grad mode, but a detached view can be one).
int64_t offset_in_base(const Tensor& base, const Tensor& view, const std::string& op) {
  if (!base.is_contiguous()) {
    fail(op, "a view of a non-contiguous tensor ", base.shape(), " (strides ", Shape(base.strides()),
         ") is written in place while gradients are recorded; make the base contiguous() first");
  }
  return view.storage_offset() - base.storage_offset();
}

Attrs geometry_attrs(const Tensor& base, const Tensor& view, const std::string& op) {
  return Attrs().set("size", view.shape()).set("stride", view.strides()).set("offset", offset_in_base(base, view, op));
}

}  // namespace

void record_view(const Tensor& input, const Tensor& view) {
  if (view.same(input) || input.is_global() || view.is_global()) return;
  // A view of a view reads the first one's base; once that base is gone the input stands for it.
  const std::shared_ptr<TensorImpl> base_of_input = view_base(input);
  const std::shared_ptr<TensorImpl> base = base_of_input ? base_of_input : input.impl_ptr();
  auto& meta = view.impl()->autograd;
  if (!meta) meta = std::make_shared<AutogradMeta>();
  meta->view_base = base;
  meta->view_base_grad_fn = Tensor(base).grad_fn();
}

void refresh_view_history(const Tensor& view) {
  AutogradMeta* meta = view.impl()->autograd.get();
  if (meta == nullptr) return;
  const std::shared_ptr<TensorImpl> base_impl = meta->view_base.lock();
  if (!base_impl) return;
  const Tensor base(base_impl);
  if (!base.requires_grad()) return;
  const std::shared_ptr<Node>& current = base.grad_fn();
  if (meta->grad_fn && same_node(meta->view_base_grad_fn, current)) return;
  auto node = std::make_shared<OpNode>(find_op("as_strided"), TensorList{base}, TensorList{view}, geometry_attrs(base, view, "as_strided"));
  meta->grad_fn = std::move(node);
  meta->output_nr = 0;
  meta->view_base_grad_fn = current;
}

std::shared_ptr<Node> rebase_history(const Tensor& view, const std::string& op, const std::shared_ptr<Node>& writer, uint32_t output_nr) {
  const Tensor base(view_base(view));
  if (base.requires_grad() && base.is_leaf()) {
    fail(op, "a view of a leaf tensor that requires grad is being used in an in-place operation");
  }
  for (int64_t d = 0; d < view.dim(); ++d) {
    if (view.stride(d) == 0 && view.size(d) > 1) {
      fail(op, "unsupported operation: more than one element of the written-to tensor ", view.shape(), " (strides ",
           Shape(view.strides()), ") refers to a single memory location; clone() it before writing");
    }
  }
  auto copy_slices = std::make_shared<CopySlices>(base, view, offset_in_base(base, view, op), gradient_edge(base), Edge{writer, output_nr});
  auto& meta = base.impl()->autograd;
  if (!meta) meta = std::make_shared<AutogradMeta>();
  meta->requires_grad = true;
  meta->grad_fn = copy_slices;
  meta->output_nr = 0;
  return copy_slices;
}

CopySlices::CopySlices(const Tensor& base, const Tensor& view, int64_t offset, Edge previous, Edge writer)
    : base_shape_(base.shape()), options_(options_beside(base)), size_(view.shape()), stride_(view.strides()), offset_(offset) {
  next_edges_ = {std::move(previous), std::move(writer)};
}

TensorList CopySlices::apply(const TensorList& grad_outputs, bool) {
  const Tensor grad = grad_outputs.at(0).defined() ? contiguous(grad_outputs[0]) : zeros(base_shape_, options_);
  TensorList grads(2);
  if (next_edges_[0].valid()) grads[0] = as_strided_scatter(grad, zeros(size_, options_), size_, stride_, offset_);
  if (next_edges_[1].valid()) grads[1] = contiguous(as_strided(grad, size_, stride_, offset_));
  return grads;
}

}  // namespace flow::autograd
