#pragma once
// Helpers shared by the element-wise op families (unary.cpp, binary.cpp).
#include <vector>

#include "core/op.h"

namespace flow::elementwise {

// Output meta: inputs broadcast together, dtype given.
inline TensorMeta broadcast_meta(const std::vector<TensorMeta>& in, DType dtype, const char* op) {
  Shape shape = in[0].shape;
  for (size_t i = 1; i < in.size(); ++i) shape = broadcast_shapes(shape, in[i].shape, op);
  return {shape, dtype, in[0].device};
}

// Inputs must share one dtype (the functional wrappers promote before calling the primitive).
inline void check_same_dtype(const std::vector<TensorMeta>& in, const char* op) {
  for (size_t i = 1; i < in.size(); ++i) {
    if (in[i].dtype != in[0].dtype) {
      fail(op, "expected inputs of one dtype, got ", dtype_name(in[0].dtype), " and ", dtype_name(in[i].dtype));
    }
  }
}

}  // namespace flow::elementwise
