#include "core/ops/checks.h"

#include <cmath>
#include <limits>

namespace flow::checks {
namespace {

template <typename T>
bool fits(const Scalar& value) {
  if (value.is_floating()) {
    const double v = value.to_double();
    // Truncation toward zero is what the kernels' casts do; the bounds are exact in double.
    return std::isfinite(v) && std::trunc(v) >= static_cast<double>(std::numeric_limits<T>::min()) &&
           std::trunc(v) <= static_cast<double>(std::numeric_limits<T>::max());
  }
  const int64_t v = value.to_int();
  if constexpr (std::is_same_v<T, uint64_t>) return v >= 0;
  else return v >= static_cast<int64_t>(std::numeric_limits<T>::min()) && v <= static_cast<int64_t>(std::numeric_limits<T>::max());
}

}  // namespace

void check_scalar_fits(const std::string& op, const Scalar& value, DType dtype, const char* what) {
  bool ok = true;
  switch (dtype) {
    case kUInt8: ok = fits<uint8_t>(value); break;
    case kInt8: ok = fits<int8_t>(value); break;
    case kInt16: ok = fits<int16_t>(value); break;
    case kUInt16: ok = fits<uint16_t>(value); break;
    case kInt32: ok = fits<int32_t>(value); break;
    case kUInt32: ok = fits<uint32_t>(value); break;
    case kInt64: ok = fits<int64_t>(value); break;
    case kUInt64: ok = fits<uint64_t>(value); break;
    default: break;  // bool takes any value; floating dtypes round (or overflow to infinity)
  }
  if (!ok) fail(op, what, " ", value, " cannot be converted to type ", dtype_name(dtype), " without overflow");
}

std::optional<int64_t> strided_extent(const Shape& shape, const Strides& strides) {
  if (shape.numel() == 0) return 0;
  int64_t extent = 1;
  for (int64_t d = 0; d < shape.ndim(); ++d) {
    int64_t span = 0;
    if (__builtin_mul_overflow(shape[d] - 1, strides[static_cast<size_t>(d)], &span) || __builtin_add_overflow(extent, span, &extent)) {
      return std::nullopt;
    }
  }
  return extent;
}

}  // namespace flow::checks
