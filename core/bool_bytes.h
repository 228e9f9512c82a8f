#pragma once
// Bytes from outside (a file, a request, a C caller) that will be read as bool: any byte but 0 or
// 1 is not a bool, and reading it as one is undefined behaviour.
#include <algorithm>
#include <optional>
#include <string_view>

namespace flow {

// The first byte that is neither 0 nor 1, if any.
inline std::optional<int> find_non_boolean_byte(std::string_view bytes) {
  const auto invalid = std::find_if(bytes.begin(), bytes.end(), [](char byte) { return byte != 0 && byte != 1; });
  if (invalid == bytes.end()) return std::nullopt;
  return static_cast<int>(static_cast<unsigned char>(*invalid));
}

}  // namespace flow
