#pragma once
// The JSON of a KServe v2 REST inference request, read without a DOM for the tensors: the `data`
// arrays of `inputs` (nearly all of a JSON request's bytes) are kept as their leaves in a compact
// form (9 bytes a value, against 16-32 for a DOM value), everything else as an nlohmann::json
// DOM. A request thus costs at most a few times its size in memory (a value takes at least two
// bytes of JSON, "0,").
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace flow::serving {

// An input's `data`: its leaves in row-major order, however the arrays nest.
struct JsonData {
  enum class Kind : uint8_t { kInteger, kUnsigned, kFloat, kBool, kNull, kString, kObject };
  std::vector<uint64_t> values;  // the int64, uint64 or double bits, or the bool
  std::vector<Kind> kinds;
  size_t depth = 0;  // how deep the arrays nest (1: a flat array)

  size_t size() const { return kinds.size(); }
  bool is_number(size_t i) const { return kinds[i] <= Kind::kFloat; }
  int64_t integer(size_t i) const { return static_cast<int64_t>(values[i]); }
  uint64_t unsigned_integer(size_t i) const { return values[i]; }
  double floating(size_t i) const;  // any number, as a double
  // The value as a message names it: a number as JSON writes it, anything else by its type.
  std::string describe(size_t i) const;
};

struct RequestJson {
  nlohmann::json header;  // every input's `data` array is null here ...
  std::map<size_t, JsonData> data;  // ... and here, by the input's index
};

// Parses a request. Throws nlohmann::json::parse_error for text that is not JSON, and
// std::invalid_argument for an input that has two `data` fields.
RequestJson parse_request_json(std::string_view text);

}  // namespace flow::serving
