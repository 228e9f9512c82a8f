#pragma once
// Host-side helpers of the CUDA kernel files (kernels.cpp, reduce_index.cpp, ...): dtype mapping,
// launch error checks, device selection, the broadcast geometry of element-wise operands and the
// (outer, n, inner) view of reductions.
#include <cstdint>
#include <optional>
#include <vector>

#include "core/kernels/cuda/launch.h"
#include "core/tensor.h"

namespace flow::cuda {

// The dtypes CUDA kernels take (those scalar_type maps).
inline const std::vector<DType> kCudaDtypes = {kFloat32, kFloat64, kInt64, kInt32, kUInt8, kInt8, kBool};
// The 16-bit floating dtypes, which the kernels that take them compute in float.
inline const std::vector<DType> kReducedFloating = {kFloat16, kBFloat16};
// dtypes plus float16 and bfloat16.
inline std::vector<DType> and_reduced(std::vector<DType> dtypes) {
  dtypes.insert(dtypes.end(), kReducedFloating.begin(), kReducedFloating.end());
  return dtypes;
}
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

// The two-int64 cell where index kernels record the first out-of-range value (zeros: none).
Tensor error_cell(const Tensor& like, const char* op);
// The value recorded in an error cell, if any (a synchronising copy: the CPU kernels fail at the
// call, so these do too).
std::optional<int64_t> recorded_error(const Tensor& error, const char* op);
// Raises gather's "index ... is out of bounds" error for a recorded value.
void check_indices(const Tensor& error, int64_t dim, int64_t size, const char* op);

struct MiddleView {
  int64_t outer = 1, n = 1, inner = 1;
};

// The (outer, n, inner) view of a contiguous tensor reduced along dims [first, last].
inline MiddleView middle_view(const Shape& shape, int64_t first, int64_t last) {
  MiddleView view;
  for (int64_t d = 0; d < shape.ndim(); ++d) {
    if (d < first) view.outer *= shape[d];
    else if (d <= last) view.n *= shape[d];
    else view.inner *= shape[d];
  }
  return view;
}

// The (outer, n, inner) view along one dim; a 0-d tensor is one element.
inline MiddleView along(const Tensor& input, int64_t dim) {
  return input.dim() == 0 ? MiddleView{} : middle_view(input.shape(), dim, dim);
}

}  // namespace flow::cuda
