#include "core/tensor.h"

#include <glog/logging.h>

#include "core/allocator.h"
#include "core/ops/all.h"

namespace flow {

const TensorImpl& Tensor::checked() const {
  if (!impl_) throw Error("[tensor] use of an undefined tensor");
  return *impl_;
}

int64_t Tensor::size(int64_t dim) const { return shape()[wrap_dim(dim, this->dim(), "size")]; }
int64_t Tensor::stride(int64_t dim) const { return strides()[wrap_dim(dim, this->dim(), "stride")]; }

bool Tensor::is_contiguous() const {
  const TensorImpl& impl = checked();
  if (impl.global) return !impl.global->local.defined() || impl.global->local.is_contiguous();
  int64_t expected = 1;
  for (int64_t d = impl.shape.ndim() - 1; d >= 0; --d) {
    if (impl.shape[d] == 1) continue;
    if (impl.strides[d] != expected) return false;
    expected *= impl.shape[d];
  }
  return true;
}

Tensor Tensor::whole_local() const {
  if (!is_global()) return *this;
  return to_global(placement(), broadcast_sbp(placement())).to_local();
}

void* Tensor::data_ptr() const {
  const TensorImpl& impl = checked();
  if (impl.global) {
    fail("data_ptr", "a global tensor has no data of its own: to_local() gives this rank's piece, "
         "to_global(placement, broadcast) then to_local() the whole tensor");
  }
  if (impl.device.is_meta()) fail("data_ptr", "a meta tensor has a shape and a dtype but no data");
  if (!impl.storage) {
    fail("data_ptr", "the tensor is lazy (a Graph is tracing build()) and has no data; its value exists only when the "
         "graph runs, so it cannot be read or branched on while tracing");
  }
  return static_cast<char*>(impl.storage->data()) + impl.offset * static_cast<int64_t>(itemsize(impl.dtype));
}

template <typename T>
T Tensor::item() const {
  if (numel() != 1) fail("item", "a tensor with ", numel(), " elements cannot be converted to a scalar");
  Tensor host = whole_local().to(kCPU).to(DTypeOf<T>::value);
  return *host.data_ptr<T>();
}

Scalar Tensor::item() const {
  if (is_floating_point()) return item<double>();
  if (dtype() == kBool) return item<bool>();
  return item<int64_t>();
}

template <typename T>
std::vector<T> Tensor::tolist() const {
  Tensor host = whole_local().to(kCPU).to(DTypeOf<T>::value).contiguous();
  const T* data = host.data_ptr<T>();
  return std::vector<T>(data, data + host.numel());
}

#define FLOW_INSTANTIATE_ACCESSORS(T)        \
  template T Tensor::item<T>() const;        \
  template std::vector<T> Tensor::tolist<T>() const;
FLOW_INSTANTIATE_ACCESSORS(bool)
FLOW_INSTANTIATE_ACCESSORS(uint8_t)
FLOW_INSTANTIATE_ACCESSORS(int8_t)
FLOW_INSTANTIATE_ACCESSORS(int32_t)
FLOW_INSTANTIATE_ACCESSORS(int64_t)
FLOW_INSTANTIATE_ACCESSORS(Half)
FLOW_INSTANTIATE_ACCESSORS(BFloat16)
FLOW_INSTANTIATE_ACCESSORS(float)
FLOW_INSTANTIATE_ACCESSORS(double)
FLOW_INSTANTIATE_ACCESSORS(int16_t)
FLOW_INSTANTIATE_ACCESSORS(uint16_t)
FLOW_INSTANTIATE_ACCESSORS(uint32_t)
FLOW_INSTANTIATE_ACCESSORS(uint64_t)
#undef FLOW_INSTANTIATE_ACCESSORS

Tensor make_tensor(const Shape& shape, DType dtype, Device device) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  impl->device = device;
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(shape.nbytes(itemsize(dtype), "tensor")), device);
  return Tensor(std::move(impl));
}

}  // namespace flow
