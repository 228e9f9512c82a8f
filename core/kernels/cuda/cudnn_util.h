#pragma once
// Plumbing shared by the cuDNN kernels (cudnn_conv.cpp, cudnn_pool_norm.cpp): one handle per
// device, descriptors that destroy themselves, status checks that become flow::Error naming the
// op, and the alpha/beta scaling constants of the data type.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <glog/logging.h>

#include <climits>
#include <mutex>

#include "core/kernels/cuda/launch.h"
#include "core/op.h"

namespace flow::cuda::cudnn {

inline void check(cudnnStatus_t status, const char* op, const char* call) {
  if (status != CUDNN_STATUS_SUCCESS) fail(op, "cuDNN ", call, " failed: ", cudnnGetErrorString(status));
}

inline void check_launch(const char* error, const char* op) {
  if (error != nullptr) fail(op, "CUDA kernel failed: ", error);
}

// The handle of a device, held for one kernel's cuDNN calls: a handle must not be used by two
// threads at once. Handles run on the default stream, as flow's own CUDA kernels do, so they are
// ordered with them without events.
struct Session {
  std::unique_lock<std::mutex> lock;
  cudnnHandle_t handle;
};

// Makes like's device current and holds its handle.
inline Session session(const Tensor& like, const char* op) {
  constexpr int kMaxDevices = 64;
  static std::mutex devices_mutex[kMaxDevices];
  static cudnnHandle_t handles[kMaxDevices] = {};
  const int device = like.device().index;
  CHECK(device >= 0 && device < kMaxDevices) << "CUDA device index " << device << " out of range";
  if (cudaSetDevice(device) != cudaSuccess) fail(op, "cannot select ", like.device());
  std::unique_lock<std::mutex> lock(devices_mutex[device]);
  if (handles[device] == nullptr) check(cudnnCreate(&handles[device]), op, "cudnnCreate");
  return {std::move(lock), handles[device]};
}

inline cudnnDataType_t data_type(DType dtype, const char* op) {
  switch (dtype) {
    case kFloat32: return CUDNN_DATA_FLOAT;
    case kFloat64: return CUDNN_DATA_DOUBLE;
    case kFloat16: return CUDNN_DATA_HALF;
    case kBFloat16: return CUDNN_DATA_BFLOAT16;
    default: fail(op, "dtype ", dtype_name(dtype), " is not supported by cuDNN kernels");
  }
}

// The type a convolution accumulates in: float for the 16-bit types (cuDNN's "pseudo half").
inline cudnnDataType_t compute_type(DType dtype, const char* op) {
  return dtype == kFloat16 || dtype == kBFloat16 ? CUDNN_DATA_FLOAT : data_type(dtype, op);
}

inline ScalarType scalar_type(DType dtype, const char* op) {
  switch (dtype) {
    case kFloat32: return ScalarType::kFloat32;
    case kFloat64: return ScalarType::kFloat64;
    case kFloat16: return ScalarType::kFloat16;
    case kBFloat16: return ScalarType::kBFloat16;
    default: fail(op, "dtype ", dtype_name(dtype), " is not supported by cuDNN kernels");
  }
}

// cuDNN's descriptors take int dims.
inline int to_int(int64_t value, const char* op, const Shape& shape) {
  if (value > INT_MAX) fail(op, "cuDNN takes dims up to ", INT_MAX, ", got ", shape);
  return static_cast<int>(value);
}

// alpha = 1 and beta = 0 (or 1, to accumulate) in the data type's precision: cuDNN reads float
// scaling factors for float data and double ones for double data.
inline const void* one(DType dtype) {
  static const float f = 1.0f;
  static const double d = 1.0;
  return dtype == kFloat64 ? static_cast<const void*>(&d) : static_cast<const void*>(&f);
}
inline const void* zero(DType dtype) {
  static const float f = 0.0f;
  static const double d = 0.0;
  return dtype == kFloat64 ? static_cast<const void*>(&d) : static_cast<const void*>(&f);
}

// A cuDNN descriptor destroyed with its owner: create it, then set it through get().
template <typename Descriptor, cudnnStatus_t (*create)(Descriptor*), cudnnStatus_t (*destroy)(Descriptor)>
class Owned {
 public:
  explicit Owned(const char* op) { check(create(&desc_), op, "descriptor creation"); }
  ~Owned() { destroy(desc_); }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  Descriptor get() const { return desc_; }

 private:
  Descriptor desc_ = nullptr;
};

// A dense NCHW tensor descriptor of dims (n, c, h, w).
class TensorDescriptor : public Owned<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor> {
 public:
  TensorDescriptor(DType dtype, int64_t n, int64_t c, int64_t h, int64_t w, const char* op) : Owned(op) {
    const Shape shape{n, c, h, w};
    check(cudnnSetTensor4dDescriptor(get(), CUDNN_TENSOR_NCHW, data_type(dtype, op), to_int(n, op, shape), to_int(c, op, shape),
                                     to_int(h, op, shape), to_int(w, op, shape)),
          op, "cudnnSetTensor4dDescriptor");
  }
  TensorDescriptor(DType dtype, const Shape& nchw, const char* op) : TensorDescriptor(dtype, nchw[0], nchw[1], nchw[2], nchw[3], op) {}
};

}  // namespace flow::cuda::cudnn
