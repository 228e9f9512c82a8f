#include "core/dtype.h"

#include <array>

#include "core/error.h"

namespace flow {
namespace {
struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
};
// Indexed by the enum value.
constexpr std::array<DTypeInfo, 13> kInfos = {{
    {kBool, "bool", 1},
    {kUInt8, "uint8", 1},
    {kInt8, "int8", 1},
    {kInt32, "int32", 4},
    {kInt64, "int64", 8},
    {kFloat16, "float16", 2},
    {kBFloat16, "bfloat16", 2},
    {kFloat32, "float32", 4},
    {kFloat64, "float64", 8},
    {kInt16, "int16", 2},
    {kUInt16, "uint16", 2},
    {kUInt32, "uint32", 4},
    {kUInt64, "uint64", 8},
}};

// The order in which two integer dtypes promote: the wider wins, signed before unsigned of a
// width (bool lowest).
int integer_rank(DType dtype) {
  constexpr std::array<DType, 9> kOrder = {kBool, kUInt8, kInt8, kInt16, kUInt16, kInt32, kUInt32, kInt64, kUInt64};
  for (size_t i = 0; i < kOrder.size(); ++i) {
    if (kOrder[i] == dtype) return static_cast<int>(i);
  }
  return -1;
}
}  // namespace

size_t itemsize(DType dtype) { return kInfos[static_cast<size_t>(dtype)].size; }
std::string dtype_name(DType dtype) { return kInfos[static_cast<size_t>(dtype)].name; }

DType dtype_from_name(const std::string& name) {
  for (const auto& info : kInfos) {
    if (name == info.name) return info.dtype;
  }
  fail("dtype", "unknown dtype name '", name, "'");
}

bool is_floating(DType dtype) { return is_reduced_floating(dtype) || dtype == kFloat32 || dtype == kFloat64; }

bool is_reduced_floating(DType dtype) { return dtype == kFloat16 || dtype == kBFloat16; }

bool is_integral(DType dtype, bool include_bool) {
  return dtype == kUInt8 || dtype == kInt8 || dtype == kInt16 || dtype == kInt32 || dtype == kInt64 ||
         dtype == kUInt16 || dtype == kUInt32 || dtype == kUInt64 || (include_bool && dtype == kBool);
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  const bool a_float = is_floating(a), b_float = is_floating(b);
  if (a_float && b_float) {
    // float16 with bfloat16 has no common 16-bit type: PyTorch gives float32.
    if ((a == kFloat16 && b == kBFloat16) || (a == kBFloat16 && b == kFloat16)) return kFloat32;
    return static_cast<uint8_t>(a) > static_cast<uint8_t>(b) ? a : b;
  }
  if (a_float) return a;
  if (b_float) return b;
  if (a == kBool) return b;
  if (b == kBool) return a;
  // Signed/unsigned 8-bit mix needs a wider signed type; without int16 that is int32.
  // (int16 is storage-only, so it is not the result of arithmetic promotion.)
  if ((a == kUInt8 && b == kInt8) || (a == kInt8 && b == kUInt8)) return kInt32;
  return integer_rank(a) > integer_rank(b) ? a : b;
}

std::vector<DType> all_dtypes() { return {kBool, kUInt8, kInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64}; }
std::vector<DType> storage_dtypes() {
  std::vector<DType> dtypes = all_dtypes();
  dtypes.insert(dtypes.end(), {kInt16, kUInt16, kUInt32, kUInt64});
  return dtypes;
}
std::vector<DType> numeric_dtypes() { return {kUInt8, kInt8, kInt32, kInt64, kFloat32, kFloat64}; }
std::vector<DType> floating_dtypes() { return {kFloat32, kFloat64}; }

std::ostream& operator<<(std::ostream& out, DType dtype) { return out << "flow." << dtype_name(dtype); }

}  // namespace flow
