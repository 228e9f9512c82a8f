#include "serving/rest_codec.h"

#include <charconv>
#include <cstring>
#include <limits>
#include <utility>

#include "serving/status.h"

namespace flow::serving {
namespace {

using grpc::StatusCode;
using nlohmann::json;

// Follows a field of a JSON object: a missing one is nullptr.
const json* field(const json& object, const char* name) {
  const auto found = object.find(name);
  return found == object.end() ? nullptr : &*found;
}

// `index` counts the values in row-major order.
[[noreturn]] void bad_value(const std::string& what, size_t index, const std::string& problem) {
  fail_status(StatusCode::INVALID_ARGUMENT, what, ": data value ", index, ": ", problem);
}

template <typename T>
T integer_value(const JsonData& data, size_t i, const std::string& datatype, const std::string& what) {
  using Kind = JsonData::Kind;
  if (data.kinds[i] == Kind::kUnsigned) {
    const uint64_t number = data.unsigned_integer(i);
    if (!std::in_range<T>(number)) bad_value(what, i, std::to_string(number) + " is out of range for " + datatype);
    return static_cast<T>(number);
  }
  if (data.kinds[i] == Kind::kInteger) {
    const int64_t number = data.integer(i);
    if (!std::in_range<T>(number)) bad_value(what, i, std::to_string(number) + " is out of range for " + datatype);
    return static_cast<T>(number);
  }
  bad_value(what, i, data.describe(i) + " is not an integer");
}

double float_value(const JsonData& data, size_t i, const std::string& what) {
  if (!data.is_number(i)) bad_value(what, i, data.describe(i) + " is not a number");
  return data.floating(i);
}

template <typename T, typename Convert>
std::string leaves_to_raw(const JsonData& data, Convert convert) {
  std::string raw(data.size() * sizeof(T), '\0');
  for (size_t i = 0; i < data.size(); ++i) {
    const T element = convert(i);
    std::memcpy(raw.data() + i * sizeof(T), &element, sizeof(T));
  }
  return raw;
}

template <typename T>
std::string integers_to_raw(const JsonData& data, const std::string& datatype, const std::string& what) {
  return leaves_to_raw<T>(data, [&](size_t i) { return integer_value<T>(data, i, datatype, what); });
}

// The JSON `data` of an input as the raw bytes of `count` elements of `dtype`. Its arrays may
// nest at most `rank` deep (any depth for a scalar's shape).
std::string json_data_to_raw(const JsonData& data, size_t rank, const std::string& datatype, DType dtype, int64_t count,
                             const std::string& what) {
  if (rank > 0 && data.depth > rank) {
    fail_status(StatusCode::INVALID_ARGUMENT, what, ": data nests deeper than the shape's ", rank, " dimensions");
  }
  if (static_cast<int64_t>(data.size()) != count) {
    fail_status(StatusCode::INVALID_ARGUMENT, what, ": expected ", count, " values in data, got ", data.size());
  }
  const auto as_float = [&](size_t i) { return float_value(data, i, what); };
  switch (dtype) {
    case kBool:
      return leaves_to_raw<uint8_t>(data, [&](size_t i) {
        if (data.kinds[i] != JsonData::Kind::kBool) bad_value(what, i, data.describe(i) + " is not true or false");
        return static_cast<uint8_t>(data.values[i]);
      });
    case kUInt8: return integers_to_raw<uint8_t>(data, datatype, what);
    case kUInt16: return integers_to_raw<uint16_t>(data, datatype, what);
    case kUInt32: return integers_to_raw<uint32_t>(data, datatype, what);
    case kUInt64: return integers_to_raw<uint64_t>(data, datatype, what);
    case kInt8: return integers_to_raw<int8_t>(data, datatype, what);
    case kInt16: return integers_to_raw<int16_t>(data, datatype, what);
    case kInt32: return integers_to_raw<int32_t>(data, datatype, what);
    case kInt64: return integers_to_raw<int64_t>(data, datatype, what);
    case kFloat32: return leaves_to_raw<float>(data, as_float);
    case kFloat64: return leaves_to_raw<double>(data, as_float);
    case kFloat16:
    case kBFloat16: {
      // JSON numbers are read as float32, then rounded to the half-precision type by flow's cast.
      Tensor values = make_tensor(Shape{count}, kFloat32, kCPU);
      const std::string floats = leaves_to_raw<float>(data, as_float);
      std::memcpy(values.data_ptr(), floats.data(), floats.size());
      const Tensor half = values.to(dtype);
      return {static_cast<const char*>(half.data_ptr()), static_cast<size_t>(count) * itemsize(dtype)};
    }
  }
  fail_status(StatusCode::INVALID_ARGUMENT, what, ": datatype ", datatype, " cannot be read from JSON");
}

template <typename T>
json values_of(const Tensor& tensor) {
  const T* data = static_cast<const T*>(tensor.data_ptr());
  return json(std::vector<T>(data, data + tensor.numel()));
}

// An output's elements as a flat JSON array (half-precision types as float32 numbers).
json json_data(const Tensor& tensor) {
  switch (tensor.dtype()) {
    case kBool: return values_of<bool>(tensor);
    case kUInt8: return values_of<uint8_t>(tensor);
    case kUInt16: return values_of<uint16_t>(tensor);
    case kUInt32: return values_of<uint32_t>(tensor);
    case kUInt64: return values_of<uint64_t>(tensor);
    case kInt8: return values_of<int8_t>(tensor);
    case kInt16: return values_of<int16_t>(tensor);
    case kInt32: return values_of<int32_t>(tensor);
    case kInt64: return values_of<int64_t>(tensor);
    case kFloat32: return values_of<float>(tensor);
    case kFloat64: return values_of<double>(tensor);
    case kFloat16:
    case kBFloat16: return values_of<float>(tensor.to(kFloat32));
  }
  fail("serving", "dtype ", dtype_name(tensor.dtype()), " has no JSON form");
}

const json& required(const json& object, const char* name, const std::string& where, const std::string& what) {
  const json* value = field(object, name);
  if (!value) fail_status(StatusCode::INVALID_ARGUMENT, what, ": ", where, " has no '", name, "'");
  return *value;
}

std::string string_field(const json& object, const char* name, const std::string& where, const std::string& what) {
  const json& value = required(object, name, where, what);
  if (!value.is_string()) fail_status(StatusCode::INVALID_ARGUMENT, what, ": ", where, ".", name, " must be a string");
  return value.get<std::string>();
}

// parameters.<name> of an object when it is there: a bool.
std::optional<bool> bool_parameter(const json& object, const char* name, const std::string& where,
                                   const std::string& what) {
  const json* parameters = field(object, "parameters");
  if (!parameters) return std::nullopt;
  if (!parameters->is_object()) {
    fail_status(StatusCode::INVALID_ARGUMENT, what, ": ", where, ".parameters must be an object");
  }
  const json* value = field(*parameters, name);
  if (!value) return std::nullopt;
  if (!value->is_boolean()) {
    fail_status(StatusCode::INVALID_ARGUMENT, what, ": ", where, ".parameters.", name, " must be true or false");
  }
  return value->get<bool>();
}

std::vector<int64_t> shape_field(const json& input, const std::string& where, const std::string& what) {
  const json& shape = required(input, "shape", where, what);
  if (!shape.is_array()) fail_status(StatusCode::INVALID_ARGUMENT, what, ": ", where, ".shape must be an array");
  std::vector<int64_t> dims;
  for (const json& dim : shape) {
    if (!dim.is_number_integer() || (dim.is_number_unsigned() && !std::in_range<int64_t>(dim.get<uint64_t>()))) {
      fail_status(StatusCode::INVALID_ARGUMENT, what, ": ", where, ".shape must hold integers of int64");
    }
    dims.push_back(dim.get<int64_t>());
  }
  return dims;
}

// parameters.binary_data_size of an input when it is there.
std::optional<uint64_t> binary_data_size(const json& input, const std::string& where, const std::string& what) {
  const json* parameters = field(input, "parameters");
  if (!parameters) return std::nullopt;
  if (!parameters->is_object()) {
    fail_status(StatusCode::INVALID_ARGUMENT, what, ": ", where, ".parameters must be an object");
  }
  const json* size = field(*parameters, "binary_data_size");
  if (!size) return std::nullopt;
  if (!size->is_number_unsigned()) {
    fail_status(StatusCode::INVALID_ARGUMENT, what, ": ", where,
                ".parameters.binary_data_size must be an integer >= 0");
  }
  return size->get<uint64_t>();
}

}  // namespace

RestBody parse_rest_body(std::string_view body, const std::optional<std::string>& header_length,
                         const std::string& what) {
  size_t json_length = body.size();
  if (header_length) {
    const char* end = header_length->data() + header_length->size();
    const auto [stop, error] = std::from_chars(header_length->data(), end, json_length);
    if (error != std::errc() || stop != end || json_length > body.size()) {
      fail_status(StatusCode::INVALID_ARGUMENT, what, ": ", kInferenceHeaderContentLength, " '", *header_length,
                  "' is not a length within the body's ", body.size(), " bytes");
    }
  }
  RestBody parsed;
  try {
    parsed.json = parse_request_json(body.substr(0, json_length));
  } catch (const json::exception& error) {
    fail_status(StatusCode::INVALID_ARGUMENT, what, ": the request is not valid JSON: ", error.what());
  } catch (const std::invalid_argument& error) {
    fail_status(StatusCode::INVALID_ARGUMENT, what, ": ", error.what());
  }
  parsed.binary = body.substr(json_length);
  return parsed;
}

RestInferRequest rest_infer_request(const RestBody& body, const std::string& what) {
  const json& header = body.json.header;
  if (!header.is_object()) fail_status(StatusCode::INVALID_ARGUMENT, what, ": the request must be a JSON object");
  RestInferRequest request;
  if (const json* id = field(header, "id")) {
    if (!id->is_string()) fail_status(StatusCode::INVALID_ARGUMENT, what, ": id must be a string");
    request.id = id->get<std::string>();
  }
  request.binary_data_output = bool_parameter(header, "binary_data_output", "the request", what).value_or(false);

  const json& inputs = required(header, "inputs", "the request", what);
  if (!inputs.is_array()) fail_status(StatusCode::INVALID_ARGUMENT, what, ": inputs must be an array");
  size_t binary_offset = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const json& input = inputs[i];
    const std::string where = "inputs[" + std::to_string(i) + "]";
    if (!input.is_object()) fail_status(StatusCode::INVALID_ARGUMENT, what, ": ", where, " must be an object");
    RequestInput decoded{string_field(input, "name", where, what), string_field(input, "datatype", where, what),
                         shape_field(input, where, what), {}, {}};
    const std::optional<uint64_t> binary_size = binary_data_size(input, where, what);
    const json* data = field(input, "data");
    const std::string input_what = what + ", input '" + decoded.name + "'";
    if (binary_size && data) {
      fail_status(StatusCode::INVALID_ARGUMENT, input_what, ": both data and parameters.binary_data_size");
    }
    if (binary_size) {
      if (*binary_size > body.binary.size() - binary_offset) {
        fail_status(StatusCode::INVALID_ARGUMENT, input_what, ": binary_data_size ", *binary_size, " but only ",
                    body.binary.size() - binary_offset, " bytes of binary data are left");
      }
      decoded.raw = body.binary.substr(binary_offset, *binary_size);
      binary_offset += *binary_size;
    } else if (const auto array = body.json.data.find(i); array != body.json.data.end()) {
      decoded.typed = [&data = array->second, rank = decoded.shape.size(), datatype = decoded.datatype](
                          DType dtype, int64_t count, const std::string& value_what) {
        return json_data_to_raw(data, rank, datatype, dtype, count, value_what);
      };
    } else if (data) {
      fail_status(StatusCode::INVALID_ARGUMENT, input_what, ": data must be an array");
    } else {
      fail_status(StatusCode::INVALID_ARGUMENT, input_what, ": neither data nor parameters.binary_data_size");
    }
    request.inputs.push_back(std::move(decoded));
  }
  if (binary_offset != body.binary.size()) {
    fail_status(StatusCode::INVALID_ARGUMENT, what, ": ", body.binary.size() - binary_offset,
                " bytes of binary data that no input's binary_data_size accounts for");
  }

  if (const json* outputs = field(header, "outputs")) {
    if (!outputs->is_array()) fail_status(StatusCode::INVALID_ARGUMENT, what, ": outputs must be an array");
    for (size_t i = 0; i < outputs->size(); ++i) {
      const json& output = (*outputs)[i];
      const std::string where = "outputs[" + std::to_string(i) + "]";
      if (!output.is_object()) fail_status(StatusCode::INVALID_ARGUMENT, what, ": ", where, " must be an object");
      request.outputs.push_back(string_field(output, "name", where, what));
      request.binary_outputs.push_back(
          bool_parameter(output, "binary_data", where, what).value_or(request.binary_data_output));
    }
  }
  return request;
}

RestResponseBody rest_infer_response(const std::string& model_name, const std::string& model_version,
                                     const RestInferRequest& request, const std::vector<ResponseOutput>& outputs) {
  json header = {{"model_name", model_name}, {"model_version", model_version}};
  if (!request.id.empty()) header["id"] = request.id;
  json& tensors = header["outputs"] = json::array();
  std::string binary;
  bool any_binary = false;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const ResponseOutput& output = outputs[i];
    json tensor = {{"name", output.name}, {"datatype", output.datatype}, {"shape", output.tensor.shape().vec()}};
    const bool as_binary = request.outputs.empty() ? request.binary_data_output : request.binary_outputs[i];
    any_binary = any_binary || as_binary;
    if (as_binary) {
      tensor["parameters"] = {{"binary_data_size", output.bytes().size()}};
      binary.append(output.bytes());
    } else {
      tensor["data"] = json_data(output.tensor);
    }
    tensors.push_back(std::move(tensor));
  }
  RestResponseBody response{json_text(header), "application/json", std::nullopt};
  if (any_binary) {
    response.header_length = response.body.size();
    response.content_type = "application/octet-stream";
    response.body += binary;
  }
  return response;
}

std::string json_text(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace flow::serving
