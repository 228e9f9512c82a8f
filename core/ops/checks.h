#pragma once
// Argument checks shared by the ops' meta inference (infer). Infer is the one place an op's
// arguments are checked, whoever calls it (eager, a Graph, oneflow_lite loading a Job), so each
// check here assumes nothing about its caller and costs a few comparisons.
#include <optional>
#include <string>
#include <vector>

#include "core/op.h"

namespace flow::checks {

// A dim attribute in [0, ndim): the functional wrappers wrap negative dims before building attrs.
inline void check_axis(const std::string& op, int64_t dim, int64_t ndim) {
  if (dim < 0 || dim >= ndim) fail(op, "dim ", dim, " out of range for a tensor of ", ndim, " dimensions (expected in [0, ", ndim - 1, "])");
}

inline void check_floating(const std::string& op, const TensorMeta& meta, const char* what) {
  if (!is_floating(meta.dtype)) fail(op, "expected a floating point ", what, ", got ", dtype_name(meta.dtype));
}

inline void check_same_dtype(const std::string& op, const TensorMeta& a, const TensorMeta& b, const char* what) {
  if (a.dtype != b.dtype) fail(op, what, " has dtype ", dtype_name(b.dtype), " but input has ", dtype_name(a.dtype));
}

// A shape given as an attribute: dims non-negative.
inline Shape shape_attr(const std::string& op, const Attrs& attrs, const char* name) {
  const auto& dims = attrs.get<std::vector<int64_t>>(name);
  for (int64_t d : dims) {
    if (d < 0) fail(op, name, " must have non-negative dims, got ", Shape(dims));
  }
  return Shape(dims);
}

// A scalar written into tensors of dtype must be representable there (PyTorch's "value cannot be
// converted to type int32_t without overflow"): the kernels convert it with a plain cast.
void check_scalar_fits(const std::string& op, const Scalar& value, DType dtype, const char* what);

// The elements, from the first, that a layout of `shape` with non-negative `strides` reaches (0 for
// an empty shape): the storage a strided view needs. nullopt when int64 cannot count them.
std::optional<int64_t> strided_extent(const Shape& shape, const Strides& strides);

}  // namespace flow::checks
