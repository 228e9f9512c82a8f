// flow::load_bytes (the safetensors parser behind flow::load) on any bytes. A flow::Error is a
// rejection. An accepted file must be valid: its tensors tile the data area exactly, and the
// header names each tensor once (the parser must not merge a repeated name).
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string_view>

#include "core/serialization.h"
#include "fuzz_util.h"

namespace {

// The top-level keys of the header as written, repeats included, "__metadata__" excluded.
size_t tensor_keys(std::string_view header) {
  size_t keys = 0;
  auto count = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (depth == 1 && event == nlohmann::json::parse_event_t::key && parsed.get<std::string>() != "__metadata__") ++keys;
    return true;
  };
  (void)nlohmann::json::parse(header, count);
  return keys;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  flow::StateDict state;
  try {
    state = flow::load_bytes(bytes, "fuzz");
  } catch (const flow::Error&) {
    return 0;
  }
  uint64_t header_length = 0;
  std::memcpy(&header_length, data, 8);  // accepted, so at least 8 bytes; little-endian host
  uint64_t tensor_bytes = 0;
  for (const auto& [name, tensor] : state) {
    if (!tensor.is_contiguous() || tensor.device() != flow::kCPU) flow_fuzz::invalid_accepted("a loaded tensor is not a contiguous CPU tensor");
    tensor_bytes += static_cast<uint64_t>(tensor.numel()) * flow::itemsize(tensor.dtype());
  }
  if (tensor_bytes != size - 8 - header_length) flow_fuzz::invalid_accepted("the tensors do not cover the data area exactly");
  if (tensor_keys(bytes.substr(8, header_length)) != state.size()) flow_fuzz::invalid_accepted("a tensor name repeats in the header");
  return 0;
}
