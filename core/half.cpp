#include "core/half.h"

namespace flow {

// IEEE 754 binary16 <-> binary32, round to nearest even, with subnormals, infinities and NaN.
uint16_t Half::from_float(float value) {
  uint32_t f;
  std::memcpy(&f, &value, 4);
  const uint32_t sign = (f >> 16) & 0x8000u;
  f &= 0x7fffffffu;
  if (f >= 0x7f800000u) return static_cast<uint16_t>(sign | (f > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (f >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to infinity
  if (f < 0x38800000u) {                                                // subnormal or zero
    if (f < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t exponent = f >> 23;
    const uint32_t mantissa = (f & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = ((f >> 13) - (112u << 10));
  const uint32_t rest = f & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

float Half::to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  uint32_t f;
  if (exponent == 0) {
    if (mantissa == 0) {
      f = sign;
    } else {
      exponent = 113;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      f = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
    }
  } else if (exponent == 31) {
    f = sign | 0x7f800000u | (mantissa << 13);
  } else {
    f = sign | ((exponent + 112) << 23) | (mantissa << 13);
  }
  float value;
  std::memcpy(&value, &f, 4);
  return value;
}

}  // namespace flow
