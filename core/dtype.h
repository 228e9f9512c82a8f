#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "core/half.h"

namespace flow {

// kInt16 .. kUInt64 are storage-only: tensors of them are created, copied, cast, saved and
// exported, but no arithmetic kernel takes them (serving passes every KServe datatype through).
enum class DType : uint8_t {
  kBool, kUInt8, kInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64,
  kInt16, kUInt16, kUInt32, kUInt64
};

// PyTorch-style short names: flow::kFloat32 etc.
inline constexpr DType kBool = DType::kBool;
inline constexpr DType kUInt8 = DType::kUInt8;
inline constexpr DType kInt8 = DType::kInt8;
inline constexpr DType kInt32 = DType::kInt32;
inline constexpr DType kInt64 = DType::kInt64;
inline constexpr DType kFloat16 = DType::kFloat16;
inline constexpr DType kBFloat16 = DType::kBFloat16;
inline constexpr DType kFloat32 = DType::kFloat32;
inline constexpr DType kFloat64 = DType::kFloat64;
inline constexpr DType kInt16 = DType::kInt16;
inline constexpr DType kUInt16 = DType::kUInt16;
inline constexpr DType kUInt32 = DType::kUInt32;
inline constexpr DType kUInt64 = DType::kUInt64;

size_t itemsize(DType dtype);
// "float32", "int64", ...
std::string dtype_name(DType dtype);
// Inverse of dtype_name; throws flow::Error for an unknown name.
DType dtype_from_name(const std::string& name);
bool is_floating(DType dtype);
// float16 or bfloat16: stored in 16 bits, computed in float32 on the CPU.
bool is_reduced_floating(DType dtype);
bool is_integral(DType dtype, bool include_bool = false);
// Type promotion as in PyTorch: bool < integers < floating, wider wins; uint8 with int8 gives int32.
DType promote_types(DType a, DType b);
// The default float type used for creation functions and integer-to-float ops.
inline constexpr DType kDefaultFloat = DType::kFloat32;

std::ostream& operator<<(std::ostream& out, DType dtype);  // prints flow.float32

// DType sets used when registering kernels. all_dtypes() has every dtype with arithmetic;
// storage_dtypes() adds the storage-only ones (for copy and cast).
std::vector<DType> all_dtypes();
std::vector<DType> storage_dtypes();
std::vector<DType> numeric_dtypes();   // all but bool and the 16-bit floats
std::vector<DType> floating_dtypes();  // float32, float64

template <typename T>
struct DTypeOf;
template <> struct DTypeOf<bool> { static constexpr DType value = kBool; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = kUInt8; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = kInt8; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = kInt32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = kInt64; };
template <> struct DTypeOf<Half> { static constexpr DType value = kFloat16; };
template <> struct DTypeOf<BFloat16> { static constexpr DType value = kBFloat16; };
template <> struct DTypeOf<float> { static constexpr DType value = kFloat32; };
template <> struct DTypeOf<double> { static constexpr DType value = kFloat64; };
template <> struct DTypeOf<int16_t> { static constexpr DType value = kInt16; };
template <> struct DTypeOf<uint16_t> { static constexpr DType value = kUInt16; };
template <> struct DTypeOf<uint32_t> { static constexpr DType value = kUInt32; };
template <> struct DTypeOf<uint64_t> { static constexpr DType value = kUInt64; };

}  // namespace flow

// Type dispatch: FLOW_DISPATCH_*(dtype, "op", [&]<typename scalar_t>() { ... }) calls the generic
// lambda with the C++ type for dtype; an unsupported dtype throws flow::Error naming the op.
#define FLOW_DTYPE_CASE(enum_value, cpp_type) \
  case enum_value:                            \
    return flow_fn.template operator()<cpp_type>();

#define FLOW_DISPATCH_FLOATING(dtype, op, ...)                                 \
  [&](auto&& flow_fn) {                                                        \
    switch (dtype) {                                                           \
      FLOW_DTYPE_CASE(::flow::DType::kFloat32, float)                          \
      FLOW_DTYPE_CASE(::flow::DType::kFloat64, double)                         \
      default:                                                                 \
        ::flow::fail(op, "unsupported dtype ", ::flow::dtype_name(dtype));     \
    }                                                                          \
  }(__VA_ARGS__)

#define FLOW_DISPATCH_NUMERIC(dtype, op, ...)                                  \
  [&](auto&& flow_fn) {                                                        \
    switch (dtype) {                                                           \
      FLOW_DTYPE_CASE(::flow::DType::kFloat32, float)                          \
      FLOW_DTYPE_CASE(::flow::DType::kFloat64, double)                         \
      FLOW_DTYPE_CASE(::flow::DType::kInt64, int64_t)                          \
      FLOW_DTYPE_CASE(::flow::DType::kInt32, int32_t)                          \
      FLOW_DTYPE_CASE(::flow::DType::kInt8, int8_t)                            \
      FLOW_DTYPE_CASE(::flow::DType::kUInt8, uint8_t)                          \
      default:                                                                 \
        ::flow::fail(op, "unsupported dtype ", ::flow::dtype_name(dtype));     \
    }                                                                          \
  }(__VA_ARGS__)

#define FLOW_DISPATCH_ALL(dtype, op, ...)                                      \
  [&](auto&& flow_fn) {                                                        \
    switch (dtype) {                                                           \
      FLOW_DTYPE_CASE(::flow::DType::kFloat32, float)                          \
      FLOW_DTYPE_CASE(::flow::DType::kFloat64, double)                         \
      FLOW_DTYPE_CASE(::flow::DType::kInt64, int64_t)                          \
      FLOW_DTYPE_CASE(::flow::DType::kInt32, int32_t)                          \
      FLOW_DTYPE_CASE(::flow::DType::kInt8, int8_t)                            \
      FLOW_DTYPE_CASE(::flow::DType::kUInt8, uint8_t)                          \
      FLOW_DTYPE_CASE(::flow::DType::kBool, bool)                              \
      FLOW_DTYPE_CASE(::flow::DType::kFloat16, ::flow::Half)                   \
      FLOW_DTYPE_CASE(::flow::DType::kBFloat16, ::flow::BFloat16)              \
      default:                                                                 \
        break;                                                                 \
    }                                                                          \
    ::flow::fail(op, "unsupported dtype ", ::flow::dtype_name(dtype));        \
  }(__VA_ARGS__)

// Every dtype, the storage-only ones included: for kernels that only move or cast values.
#define FLOW_DISPATCH_STORAGE(dtype, op, ...)                                  \
  [&](auto&& flow_fn) {                                                        \
    switch (dtype) {                                                           \
      FLOW_DTYPE_CASE(::flow::DType::kInt16, int16_t)                          \
      FLOW_DTYPE_CASE(::flow::DType::kUInt16, uint16_t)                        \
      FLOW_DTYPE_CASE(::flow::DType::kUInt32, uint32_t)                        \
      FLOW_DTYPE_CASE(::flow::DType::kUInt64, uint64_t)                        \
      default:                                                                 \
        return FLOW_DISPATCH_ALL(dtype, op, flow_fn);                          \
    }                                                                          \
  }(__VA_ARGS__)
