#pragma once
#include <type_traits>

#include "core/half.h"

namespace flow::cpu {

// Value conversion between any two storage types; 16-bit floats go through float.
template <typename Out, typename In>
inline Out convert(In value) {
  if constexpr (std::is_same_v<Out, In>) {
    return value;
  } else if constexpr (std::is_same_v<In, Half> || std::is_same_v<In, BFloat16>) {
    return convert<Out>(static_cast<float>(value));
  } else if constexpr (std::is_same_v<Out, Half> || std::is_same_v<Out, BFloat16>) {
    return Out(static_cast<float>(value));
  } else {
    return static_cast<Out>(value);
  }
}

}  // namespace flow::cpu
