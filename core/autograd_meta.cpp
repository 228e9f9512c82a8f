#include "core/autograd_meta.h"

#include <glog/logging.h>

namespace flow {
namespace {
AutogradMeta& meta_of(TensorImpl* impl) {
  if (!impl->autograd) impl->autograd = std::make_shared<AutogradMeta>();
  return *impl->autograd;
}

// A view requires grad when its base does, also when the base's history began after the view
// was made (a write through another view of it).
bool base_requires_grad(const AutogradMeta& meta) {
  if (meta.view_base.expired()) return false;
  const std::shared_ptr<TensorImpl> base = meta.view_base.lock();
  return base && base->autograd && base->autograd->requires_grad;
}
}  // namespace

std::shared_ptr<TensorImpl> view_base(const Tensor& tensor) {
  const auto& meta = tensor.impl()->autograd;
  return meta ? meta->view_base.lock() : nullptr;
}

bool Tensor::requires_grad() const {
  const auto& meta = impl()->autograd;
  return meta && (meta->requires_grad || base_requires_grad(*meta));
}

Tensor& Tensor::requires_grad_(bool requires_grad) {
  if (!defined()) fail("requires_grad_", "undefined tensor");
  if (!is_leaf()) {
    fail("requires_grad_", "you can only change requires_grad flags of leaf tensors; use detach() to get a leaf "
         "from a non-leaf");
  }
  if (requires_grad && !is_floating_point()) {
    fail("requires_grad_", "only tensors of floating point dtype can require gradients, got ", dtype_name(dtype()));
  }
  meta_of(impl()).requires_grad = requires_grad;
  return *this;
}

Tensor Tensor::grad() const {
  const auto& meta = impl()->autograd;
  return meta ? meta->grad : Tensor();
}

void Tensor::set_grad(const Tensor& grad) {
  if (grad.defined() && !(grad.shape() == shape())) {
    fail("grad", "assigned grad has shape ", grad.shape(), " but the tensor has shape ", shape());
  }
  meta_of(impl()).grad = grad;
}

bool Tensor::is_leaf() const {
  const auto& meta = impl()->autograd;
  return !meta || (!meta->grad_fn && !base_requires_grad(*meta));
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> kNone;
  const auto& meta = impl()->autograd;
  return meta ? meta->grad_fn : kNone;
}

bool Tensor::retains_grad() const {
  const auto& meta = impl()->autograd;
  return meta && meta->retain_grad;
}

void RemovableHandle::remove() {
  if (!remover_) return;
  const std::function<void()> remover = std::move(remover_);
  remover_ = nullptr;
  remover();
}

RemovableHandle Tensor::register_post_accumulate_grad_hook(std::function<void(Tensor&)> hook) {
  const char* op = "register_post_accumulate_grad_hook";
  if (!defined()) fail(op, "undefined tensor");
  if (!requires_grad()) fail(op, "cannot register a hook on a tensor that doesn't require gradient");
  if (!is_leaf()) fail(op, "post accumulate grad hooks cannot be registered on non-leaf tensors");
  if (!hook) fail(op, "the hook is empty");
  AutogradMeta& meta = *impl()->autograd;
  const uint64_t id = meta.next_hook_id++;
  meta.post_accumulate_grad_hooks.emplace_back(id, std::move(hook));
  return RemovableHandle([weak_meta = std::weak_ptr<AutogradMeta>(impl()->autograd), id] {
    auto meta = weak_meta.lock();
    if (!meta) return;
    std::erase_if(meta->post_accumulate_grad_hooks, [id](const auto& entry) { return entry.first == id; });
  });
}

Tensor Tensor::detach() const {
  const TensorImpl& source = *impl();
  auto detached = std::make_shared<TensorImpl>();
  detached->shape = source.shape;
  detached->strides = source.strides;
  detached->offset = source.offset;
  detached->dtype = source.dtype;
  detached->device = source.device;
  detached->storage = source.storage;
  detached->lazy = source.lazy;
  detached->global = source.global;
  return Tensor(std::move(detached));
}

uint64_t data_version(const Tensor& tensor) {
  if (tensor.is_lazy()) return 0;
  if (tensor.is_global()) {
    const Tensor& local = tensor.impl()->global->local;
    return local.defined() ? data_version(local) : 0;
  }
  return tensor.storage()->version();
}

}  // namespace flow
