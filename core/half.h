#pragma once
// Storage types for float16 and bfloat16. Arithmetic happens in float; these only convert.
#include <cstdint>
#include <cstring>

namespace flow {

struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float value) : bits(from_float(value)) {}  // NOLINT: implicit like a built-in float type
  operator float() const { return to_float(bits); }

  static uint16_t from_float(float value);
  static float to_float(uint16_t bits);
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float value) {  // NOLINT: implicit like a built-in float type
    uint32_t u;
    std::memcpy(&u, &value, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      bits = 0x7fc0;  // quiet NaN
    } else {
      u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
      bits = static_cast<uint16_t>(u >> 16);
    }
  }
  operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float value;
    std::memcpy(&value, &u, 4);
    return value;
  }
};

}  // namespace flow
