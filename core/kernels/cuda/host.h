#pragma once
// Host-side helpers of the CUDA kernel files (kernels.cpp, reduce_index.cpp): dtype mapping,
// launch error checks, device selection and the broadcast geometry of element-wise operands.
#include <vector>

#include "core/kernels/cuda/launch.h"
#include "core/tensor.h"

namespace flow::cuda {

// The dtypes CUDA kernels take (those scalar_type maps).
inline const std::vector<DType> kCudaDtypes = {kFloat32, kFloat64, kInt64, kInt32, kUInt8, kInt8, kBool};
// The 16-bit floating dtypes, which the kernels that take them compute in float.
inline const std::vector<DType> kReducedFloating = {kFloat16, kBFloat16};
ScalarType scalar_type(DType dtype, const char* op);
// Turns a launcher's error string into flow::Error naming the op.
void check(const char* error, const char* op);
void set_device(const Tensor& t, const char* op);

// Geometry of `out` with each operand's strides broadcast to it (in elements).
struct Prepared {
  Geometry geometry;
  std::vector<Operand> operands;  // out first
};
Prepared prepare(const Tensor& out, const std::vector<const Tensor*>& inputs, const char* op);

}  // namespace flow::cuda
