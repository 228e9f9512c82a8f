#pragma once
// The KServe v2 REST inference body (JSON tensors, and Triton's binary tensor data extension)
// to the protocol-neutral RequestInput of infer_codec.h, and outputs to the JSON (+ binary)
// response body. The checks of shapes, datatypes and byte counts are infer_codec's; this file
// only checks the JSON's structure.
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "serving/infer_codec.h"
#include "serving/rest_json.h"

namespace flow::serving {

// Triton's header: the JSON part's length when binary data follows it.
inline constexpr const char* kInferenceHeaderContentLength = "Inference-Header-Content-Length";

// A request body split into its JSON header and the binary data after it.
struct RestBody {
  RequestJson json;
  std::string_view binary;
};

// Splits and parses the body; `header_length` is the Inference-Header-Content-Length field (none:
// the body is all JSON). Throws ServingError(INVALID_ARGUMENT) naming `what` for a length that is
// not a number within the body, or JSON that does not parse.
RestBody parse_rest_body(std::string_view body, const std::optional<std::string>& header_length,
                         const std::string& what);

struct RestInferRequest {
  std::string id;
  // Refer to the RestBody they came from, which must outlive them.
  std::vector<RequestInput> inputs;
  std::vector<std::string> outputs;  // requested names; empty: every output
  std::vector<bool> binary_outputs;  // for each requested output
  bool binary_data_output = false;   // for the outputs not requested by name
};

// The inputs and requested outputs of a v2 inference request. Throws ServingError
// (INVALID_ARGUMENT) naming `what` and the field for a body that is not a v2 inference request:
// a missing or mistyped field, an input with both or neither of `data` and binary_data_size, or
// binary data that the binary_data_size parameters do not account for exactly.
RestInferRequest rest_infer_request(const RestBody& body, const std::string& what);

struct RestResponseBody {
  std::string body;
  std::string content_type;
  std::optional<size_t> header_length;  // set when binary outputs follow the JSON
};

// The v2 inference response: the model, the request id and the outputs, each in JSON `data` or,
// when asked for, as binary data after the JSON.
RestResponseBody rest_infer_response(const std::string& model_name, const std::string& model_version,
                                     const RestInferRequest& request, const std::vector<ResponseOutput>& outputs);

// `value` as JSON text; strings that are not UTF-8 (a model name from a URL) are repaired, not
// thrown on.
std::string json_text(const nlohmann::json& value);

}  // namespace flow::serving
