#pragma once
#include <cmath>
#include <cstdint>
#include <ostream>
#include <type_traits>

namespace flow {

// A number given to an op as an attribute (full's value, add's scalar operand, clamp bounds).
// Remembers whether it was written as a floating or an integral value, for type promotion.
class Scalar {
 public:
  Scalar() = default;
  template <typename T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  Scalar(T value) {  // NOLINT: implicit, so ops take 2, 2.5 or true
    if constexpr (std::is_same_v<T, bool>) {
      kind_ = Kind::kBool;
      int_ = value;
      double_ = value;
    } else if constexpr (std::is_floating_point_v<T>) {
      kind_ = Kind::kFloating;
      double_ = static_cast<double>(value);
      int_ = saturated_int(double_);
    } else {
      kind_ = Kind::kIntegral;
      int_ = static_cast<int64_t>(value);
      double_ = static_cast<double>(value);
    }
  }
  bool is_floating() const { return kind_ == Kind::kFloating; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  double to_double() const { return double_; }
  int64_t to_int() const { return int_; }
  template <typename T>
  T to() const {
    if constexpr (std::is_floating_point_v<T>) return static_cast<T>(double_);
    else if constexpr (std::is_integral_v<T>) return static_cast<T>(int_);
    else return T(static_cast<float>(double_));
  }
  bool operator==(const Scalar& other) const = default;

 private:
  // The value truncated toward zero and clamped to int64 (NaN gives 0): casting a double int64
  // cannot hold is undefined behaviour, and a scalar may come from a file.
  static int64_t saturated_int(double value) {
    if (std::isnan(value)) return 0;
    if (value >= 0x1p63) return INT64_MAX;
    if (value < -0x1p63) return INT64_MIN;
    return static_cast<int64_t>(value);
  }
  enum class Kind : uint8_t { kIntegral, kFloating, kBool };
  Kind kind_ = Kind::kIntegral;
  int64_t int_ = 0;
  double double_ = 0;
};

inline std::ostream& operator<<(std::ostream& out, const Scalar& s) {
  if (s.is_floating()) return out << s.to_double();
  if (s.is_bool()) return out << (s.to_int() ? "true" : "false");
  return out << s.to_int();
}

}  // namespace flow
