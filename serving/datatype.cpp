#include "serving/datatype.h"

#include <array>
#include <cstring>
#include <string_view>
#include <utility>

#include "core/error.h"

namespace flow::serving {
namespace {

constexpr std::array<std::pair<DType, std::string_view>, 13> kNames{{
    {kBool, "BOOL"},
    {kUInt8, "UINT8"},
    {kUInt16, "UINT16"},
    {kUInt32, "UINT32"},
    {kUInt64, "UINT64"},
    {kInt8, "INT8"},
    {kInt16, "INT16"},
    {kInt32, "INT32"},
    {kInt64, "INT64"},
    {kFloat16, "FP16"},
    {kBFloat16, "BF16"},
    {kFloat32, "FP32"},
    {kFloat64, "FP64"},
}};

// Casts every element of a repeated field to T and appends its bytes.
template <typename T, typename Field>
std::string cast_elements(const Field& field) {
  std::string raw(field.size() * sizeof(T), '\0');
  char* out = raw.data();
  for (const auto& value : field) {
    const T element = static_cast<T>(value);
    std::memcpy(out, &element, sizeof(T));
    out += sizeof(T);
  }
  return raw;
}

}  // namespace

std::string kserve_datatype(DType dtype) {
  for (const auto& [flow_dtype, name] : kNames) {
    if (flow_dtype == dtype) return std::string(name);
  }
  fail("serving", "dtype ", dtype_name(dtype), " has no KServe datatype");
}

std::string typed_contents_to_raw(const inference::InferTensorContents& contents, DType dtype, int64_t count,
                                  const std::string& what) {
  auto checked = [&](int field_size, const char* field) {
    if (field_size != count) {
      fail("serving", what, ": expected ", count, " values in contents.", field, ", got ", field_size);
    }
  };
  switch (dtype) {
    case kBool:
      checked(contents.bool_contents_size(), "bool_contents");
      return cast_elements<uint8_t>(contents.bool_contents());
    case kUInt8:
      checked(contents.uint_contents_size(), "uint_contents");
      return cast_elements<uint8_t>(contents.uint_contents());
    case kUInt16:
      checked(contents.uint_contents_size(), "uint_contents");
      return cast_elements<uint16_t>(contents.uint_contents());
    case kUInt32:
      checked(contents.uint_contents_size(), "uint_contents");
      return cast_elements<uint32_t>(contents.uint_contents());
    case kUInt64:
      checked(contents.uint64_contents_size(), "uint64_contents");
      return cast_elements<uint64_t>(contents.uint64_contents());
    case kInt8:
      checked(contents.int_contents_size(), "int_contents");
      return cast_elements<int8_t>(contents.int_contents());
    case kInt16:
      checked(contents.int_contents_size(), "int_contents");
      return cast_elements<int16_t>(contents.int_contents());
    case kInt32:
      checked(contents.int_contents_size(), "int_contents");
      return cast_elements<int32_t>(contents.int_contents());
    case kInt64:
      checked(contents.int64_contents_size(), "int64_contents");
      return cast_elements<int64_t>(contents.int64_contents());
    case kFloat32:
      checked(contents.fp32_contents_size(), "fp32_contents");
      return cast_elements<float>(contents.fp32_contents());
    case kFloat64:
      checked(contents.fp64_contents_size(), "fp64_contents");
      return cast_elements<double>(contents.fp64_contents());
    case kFloat16:
    case kBFloat16:
      break;
  }
  fail("serving", what, ": datatype ", kserve_datatype(dtype), " has no typed contents field; send it in raw_input_contents");
}

}  // namespace flow::serving
