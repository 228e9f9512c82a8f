#pragma once
// Tensor: a cheap handle to a shared TensorImpl (meta, storage, autograd and lazy state).
#include <functional>
#include <memory>
#include <ostream>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/global/placement.h"
#include "core/scalar.h"
#include "core/shape.h"
#include "core/storage.h"

namespace flow {

struct AutogradMeta;  // core/autograd_meta.h
namespace autograd {
class Node;  // autograd/node.h
}
struct LazyInfo;      // filled in by graph/ while tracing
struct GlobalInfo;    // placement, sbp and local piece of a global tensor (below)

struct TensorImpl {
  Shape shape;
  Strides strides;
  int64_t offset = 0;  // in elements, into storage
  DType dtype = kFloat32;
  Device device;
  std::shared_ptr<Storage> storage;  // null for lazy tensors, which have meta but no data
  std::shared_ptr<AutogradMeta> autograd;
  std::shared_ptr<LazyInfo> lazy;
  // Set for global tensors: shape/dtype are the logical tensor's, storage is null and the data
  // is the local piece in global->local.
  std::shared_ptr<GlobalInfo> global;
};

class Tensor;
using TensorList = std::vector<Tensor>;

// Returned by a hook registration: remove() unregisters the hook. Removing twice, or after the
// tensor is gone, does nothing.
class RemovableHandle {
 public:
  RemovableHandle() = default;
  explicit RemovableHandle(std::function<void()> remover) : remover_(std::move(remover)) {}
  void remove();

 private:
  std::function<void()> remover_;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& other) const { return impl_ == other.impl_; }

  // Meta.
  const Shape& shape() const { return checked().shape; }
  const Shape& sizes() const { return shape(); }
  int64_t size(int64_t dim) const;
  int64_t dim() const { return shape().ndim(); }
  int64_t numel() const { return shape().numel(); }
  // Bytes the elements take (numel * itemsize), as PyTorch's Tensor.nbytes.
  int64_t nbytes() const { return shape().nbytes(itemsize(dtype())); }
  const Strides& strides() const { return checked().strides; }
  int64_t stride(int64_t dim) const;
  int64_t storage_offset() const { return checked().offset; }
  DType dtype() const { return checked().dtype; }
  Device device() const { return checked().device; }
  bool is_contiguous() const;
  bool is_lazy() const { return checked().lazy != nullptr; }
  bool is_floating_point() const { return flow::is_floating(dtype()); }

  // Global tensors (OneFlow's model): a logical tensor laid out over a placement by an sbp, of
  // which each rank holds its local piece. shape() is the logical shape.
  bool is_global() const { return checked().global != nullptr; }
  bool is_local() const { return !is_global(); }
  const Placement& placement() const;
  const NdSbp& sbp() const;
  // On a local tensor: this rank's piece of a global tensor (B: every rank holds the whole
  // tensor; S(i): the pieces concatenate along i, in rank order, and may be uneven; P: the
  // pieces sum to it). On a global tensor: the same logical tensor with another sbp (boxing:
  // collectives between the ranks). Differentiable; every rank of the placement calls it.
  Tensor to_global(const Placement& placement, const NdSbp& sbp) const;
  Tensor to_global(const Placement& placement, const Sbp& sbp) const { return to_global(placement, NdSbp{sbp}); }
  // This rank's piece of a global tensor (a local tensor is returned as is). Differentiable.
  Tensor to_local() const;
  // The whole logical tensor as a local one: a global tensor is gathered (every rank of its
  // placement calls it); a local tensor is returned as is. Reading values (item, tolist,
  // printing) goes through it.
  Tensor whole_local() const;

  // Data. data_ptr<T>() checks T against the dtype; item() needs exactly one element.
  const std::shared_ptr<Storage>& storage() const { return checked().storage; }
  void* data_ptr() const;
  template <typename T>
  T* data_ptr() const {
    if (DTypeOf<T>::value != dtype()) {
      fail("data_ptr", "requested ", dtype_name(DTypeOf<T>::value), " but the tensor is ", dtype_name(dtype()));
    }
    return static_cast<T*>(data_ptr());
  }
  template <typename T>
  T item() const;
  Scalar item() const;
  // Copies the elements into a vector of T, converting from the tensor's dtype. On a global
  // tensor item() and tolist() read the logical tensor: every rank of its placement calls them.
  template <typename T>
  std::vector<T> tolist() const;

  // Views: share storage with this tensor.
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor expand(const Shape& shape) const;
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor contiguous() const;
  Tensor clone() const;

  // Conversions.
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;
  Tensor cpu() const { return to(kCPU); }
  Tensor cuda(int index = 0) const { return to(Device(DeviceType::kCUDA, index)); }

  // In-place: copies src (broadcast and cast to this tensor's dtype) into this tensor's elements.
  Tensor& copy_(const Tensor& src);
  Tensor& fill_(const Scalar& value);
  Tensor& zero_() { return fill_(0); }

  // Autograd. backward() is defined by the autograd library (link flow_autograd).
  bool requires_grad() const;
  // Makes a leaf require (or stop requiring) gradients; floating dtypes only.
  Tensor& requires_grad_(bool requires_grad = true);
  // The accumulated gradient of a leaf (or of a non-leaf after retain_grad()); undefined if none.
  Tensor grad() const;
  void set_grad(const Tensor& grad);
  bool is_leaf() const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  // Keeps this non-leaf's gradient in grad() during backward.
  void retain_grad();
  bool retains_grad() const;
  // Runs hook(leaf) each time backward has accumulated a gradient into this leaf's grad() (not
  // for autograd::grad, which leaves grad() alone). Leaves that require grad only; hooks run in
  // registration order on the thread running backward.
  RemovableHandle register_post_accumulate_grad_hook(std::function<void(Tensor&)> hook);
  // A tensor sharing this one's storage, cut from the autograd graph.
  Tensor detach() const;
  // Gradient of this tensor w.r.t. graph leaves, accumulated into their grad(). A non-scalar
  // tensor needs `gradient` (same shape). Without retain_graph the graph's saved values are
  // freed, and a second backward through it is an error.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false, bool create_graph = false) const;

  // Math, mirroring the functional API.
  Tensor sum() const;
  Tensor sum(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor max() const;
  Tensor min() const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor matmul(const Tensor& other) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor relu() const;
  Tensor abs() const;
  Tensor sqrt() const;
  Tensor pow(const Scalar& exponent) const;
  Tensor softmax(int64_t dim) const;
  // The lower / upper triangle of the last two dims (core/ops/triangular.h).
  Tensor tril(int64_t diagonal = 0) const;
  Tensor triu(int64_t diagonal = 0) const;

 private:
  const TensorImpl& checked() const;
  std::shared_ptr<TensorImpl> impl_;
};

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, const Scalar& b);
Tensor operator-(const Tensor& a, const Scalar& b);
Tensor operator*(const Tensor& a, const Scalar& b);
Tensor operator/(const Tensor& a, const Scalar& b);
Tensor operator+(const Scalar& a, const Tensor& b);
Tensor operator-(const Scalar& a, const Tensor& b);
Tensor operator*(const Scalar& a, const Tensor& b);
Tensor operator/(const Scalar& a, const Tensor& b);
Tensor operator-(const Tensor& a);

struct GlobalInfo {
  Placement placement;
  NdSbp nd_sbp;
  Tensor local;  // undefined on ranks outside the placement
};

struct TensorMeta;  // core/op.h

namespace distributed {
// Global tensors' constructors, declared here beside Tensor's other global methods so that any
// layer (creation ops among them) may make one; defined with the rest of global tensors in
// core/global/global_tensor.cpp.

// A global tensor of logical meta `meta` whose piece on this rank is `local` (undefined off the
// placement), as PyTorch's DTensor.from_local with its shape given.
Tensor make_global(const TensorMeta& meta, const Placement& placement, const NdSbp& nd_sbp, const Tensor& local);

// The global tensor whose logical value is `whole`, which every rank of the placement passes
// (the same values): each keeps its piece under nd_sbp; a rank off the placement gets a global
// tensor with no piece (PyTorch's distribute_tensor). How creation ops, Module::to_global and
// loading a checkpoint into global state lay tensors out.
Tensor from_whole(const Tensor& whole, const Placement& placement, const NdSbp& nd_sbp);
}  // namespace distributed

// Prints like PyTorch/OneFlow: tensor([[ 3.2023,  2.9805, -2.6793]], dtype=flow.float32)
std::ostream& operator<<(std::ostream& out, const Tensor& tensor);

// Makes a new contiguous tensor with uninitialised data (no op, no autograd): kernels use it for
// outputs and scratch space.
Tensor make_tensor(const Shape& shape, DType dtype, Device device);

}  // namespace flow
