#include "distributed/gloo_reduce.h"

#include <algorithm>

#include "core/error.h"
#include "core/half.h"

namespace flow::distributed {

namespace {

// Calls body.template operator()<T>() with the C++ type of a dtype that can be reduced.
template <typename Body>
auto with_reducible_type(DType dtype, const char* op, Body&& body) {
  switch (dtype) {
    case kUInt8: return body.template operator()<uint8_t>();
    case kInt8: return body.template operator()<int8_t>();
    case kInt32: return body.template operator()<int32_t>();
    case kInt64: return body.template operator()<int64_t>();
    case kFloat16: return body.template operator()<Half>();
    case kBFloat16: return body.template operator()<BFloat16>();
    case kFloat32: return body.template operator()<float>();
    case kFloat64: return body.template operator()<double>();
    default:
      fail(op, "cannot reduce ", dtype_name(dtype),
           " tensors (uint8, int8, int32, int64, float16, bfloat16, float32 and float64 reduce)");
  }
}

// The 16-bit floats compute in float; every other type in itself.
template <typename T>
using Arithmetic = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;

template <typename T, typename Combine>
ReduceFunction elementwise(Combine combine) {
  return [combine](void* out, const void* a, const void* b, size_t n) {
    auto* result = static_cast<T*>(out);
    const auto* left = static_cast<const T*>(a);
    const auto* right = static_cast<const T*>(b);
    for (size_t i = 0; i < n; ++i) {
      result[i] = static_cast<T>(combine(static_cast<Arithmetic<T>>(left[i]), static_cast<Arithmetic<T>>(right[i])));
    }
  };
}

}  // namespace

ReduceFunction reduce_function(DType dtype, ReduceOp reduce, const char* op) {
  return with_reducible_type(dtype, op, [reduce]<typename T>() -> ReduceFunction {
    using A = Arithmetic<T>;
    switch (reduce) {
      case ReduceOp::kMax: return elementwise<T>([](A x, A y) { return std::max(x, y); });
      case ReduceOp::kMin: return elementwise<T>([](A x, A y) { return std::min(x, y); });
      case ReduceOp::kSum:
      case ReduceOp::kAvg: break;
    }
    return elementwise<T>([](A x, A y) { return static_cast<A>(x + y); });
  });
}

void divide_in_place(void* data, DType dtype, int64_t numel, int64_t divisor) {
  with_reducible_type(dtype, "all_reduce", [&]<typename T>() {
    auto* values = static_cast<T*>(data);
    for (int64_t i = 0; i < numel; ++i) {
      values[i] = static_cast<T>(static_cast<Arithmetic<T>>(values[i]) / static_cast<Arithmetic<T>>(divisor));
    }
  });
}

}  // namespace flow::distributed
