#pragma once
#include <limits>
#include <type_traits>

#include "core/half.h"

namespace flow::cpu {

// Value conversion between any two storage types; 16-bit floats go through float. A floating
// value outside an integer type's range saturates at its bounds (NaN gives 0): a plain cast of
// it is undefined behaviour, and tensor data may hold anything.
template <typename Out, typename In>
inline Out convert(In value) {
  if constexpr (std::is_same_v<Out, In>) {
    return value;
  } else if constexpr (std::is_same_v<In, Half> || std::is_same_v<In, BFloat16>) {
    return convert<Out>(static_cast<float>(value));
  } else if constexpr (std::is_same_v<Out, Half> || std::is_same_v<Out, BFloat16>) {
    return Out(static_cast<float>(value));
  } else if constexpr (std::is_floating_point_v<In> && std::is_integral_v<Out> && !std::is_same_v<Out, bool>) {
    // The bounds as In: max() rounds up to a power of two, the first value past the range.
    constexpr In lowest = static_cast<In>(std::numeric_limits<Out>::min());
    constexpr In past_max = static_cast<In>(std::numeric_limits<Out>::max());
    if (value != value) return Out(0);
    if (value <= lowest) return std::numeric_limits<Out>::min();
    if (value >= past_max) return std::numeric_limits<Out>::max();
    return static_cast<Out>(value);
  } else {
    return static_cast<Out>(value);
  }
}

}  // namespace flow::cpu
