// The KServe v2 REST inference body: serving::parse_rest_body, rest_infer_request and
// decode_infer_request, as the REST endpoint runs them, against the real exports in fuzz/data:
// "cnn" (FP32 images (-1,1,28,28) -> logits) when the request's first input is named "image",
// else "dtypes" (one (-1,2) input per KServe datatype but BYTES, identity). An input that starts
// with a decimal digit carries an Inference-Header-Content-Length (Triton's binary tensor data
// extension): the bytes before the first '\n' (at most 24) are the header's value as sent, the
// rest is the body; any other input is a body without that header, all JSON. A flow::Error
// (ServingError) is a rejection.
//
// An input read from JSON data must have a `data` field in the request's JSON (its DOM, where a
// repeated key keeps its last value). An accepted request must be what the model takes (the
// checks of infer_request_fuzz.cpp): the
// decoded inputs of the spec dtypes and shapes, batch within max_batch_size, the model runs on
// them. Its response (rest_infer_response) must be well formed: JSON (up to its
// Inference-Header-Content-Length when binary outputs follow) naming each selected output once,
// in order, with the output's shape and either `data` of numel values or a binary_data_size equal
// to the output's bytes, which follow the JSON in order and make up the rest of the body exactly.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "oneflow_lite/model.h"
#include "serving/infer_codec.h"
#include "serving/rest_codec.h"
#include "serving_fuzz.h"

namespace {

using flow_fuzz::check_decoded;
using flow_fuzz::kMaxBatchSize;
using flow_fuzz::model_named;
using nlohmann::json;

constexpr size_t kMaxHeaderField = 24;

// The request as the JSON reads it (nlohmann's DOM: a repeated key keeps its last value): an
// input read from JSON `data` has a `data` field (nulled in the header, its values kept aside).
void check_json_inputs(const flow::serving::RestBody& body, const flow::serving::RestInferRequest& request) {
  const json& inputs = body.json.header.at("inputs");
  if (!inputs.is_array() || inputs.size() != request.inputs.size()) flow_fuzz::invalid_accepted("the request's inputs differ from its JSON's");
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    if (!request.inputs[i].raw && !inputs[i].contains("data")) {
      flow_fuzz::invalid_accepted("an input without a data field is read from JSON data (a repeated key's discarded value?)");
    }
  }
}

// The response body as a client reads it: the JSON part, then each binary output in order.
void check_response(const flow::serving::RestResponseBody& response, const flow::serving::RestInferRequest& request,
                    const std::vector<flow::serving::ResponseOutput>& outputs) {
  const size_t json_length = response.header_length.value_or(response.body.size());
  if (json_length > response.body.size()) flow_fuzz::invalid_accepted("the response's header length exceeds its body");
  if (response.header_length.has_value() != (response.content_type == "application/octet-stream")) {
    flow_fuzz::invalid_accepted("the response's content type does not match its binary data");
  }
  json header;
  try {
    header = json::parse(std::string_view(response.body).substr(0, json_length));
  } catch (const json::parse_error& error) {
    std::fprintf(stderr, "%s\n", error.what());
    flow_fuzz::invalid_accepted("the response's JSON does not parse");
  }
  if (!header.is_object() || !header.contains("outputs") || !header["outputs"].is_array() ||
      header["outputs"].size() != outputs.size()) {
    flow_fuzz::invalid_accepted("the response does not list each selected output once");
  }
  if (request.id.empty() ? header.contains("id") : header.value("id", std::string()) != request.id) {
    flow_fuzz::invalid_accepted("the response's id differs from the request's");
  }
  size_t binary_offset = json_length;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const json& tensor = header["outputs"][i];
    const flow::serving::ResponseOutput& output = outputs[i];
    if (!tensor.is_object() || tensor.value("name", std::string()) != output.name ||
        tensor.value("datatype", std::string()) != output.datatype || !tensor.contains("shape") ||
        tensor["shape"] != json(output.tensor.shape().vec())) {
      flow_fuzz::invalid_accepted("a response output's name, datatype or shape differs from the output's");
    }
    const bool wants_binary = request.outputs.empty() ? request.binary_data_output : request.binary_outputs.at(i);
    if (wants_binary) {
      const size_t size = tensor.at("parameters").at("binary_data_size").get<size_t>();
      if (tensor.contains("data") || size != output.bytes().size() || size > response.body.size() - binary_offset ||
          std::string_view(response.body).substr(binary_offset, size) != output.bytes()) {
        flow_fuzz::invalid_accepted("a binary output's size or bytes differ from the output's");
      }
      binary_offset += size;
    } else if (tensor.contains("parameters") || !tensor.contains("data") || !tensor["data"].is_array() ||
               tensor["data"].size() != static_cast<size_t>(output.tensor.numel())) {
      flow_fuzz::invalid_accepted("a JSON output does not hold numel values in data");
    }
  }
  if (binary_offset != response.body.size()) flow_fuzz::invalid_accepted("the response's binary data has bytes no output accounts for");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::optional<std::string> header_length;
  if (!input.empty() && input[0] >= '0' && input[0] <= '9') {
    const size_t newline = input.substr(0, kMaxHeaderField + 1).find('\n');
    if (newline == std::string_view::npos) return 0;
    header_length = std::string(input.substr(0, newline));
    input.remove_prefix(newline + 1);
  }

  flow::serving::RestBody body;
  flow::serving::RestInferRequest request;
  const flow::lite::Model* model = nullptr;
  flow::serving::DecodedRequest decoded;
  try {
    body = flow::serving::parse_rest_body(input, header_length, "fuzz");
    request = flow::serving::rest_infer_request(body, "fuzz");
    check_json_inputs(body, request);
    model = &model_named(!request.inputs.empty() && request.inputs[0].name == "image" ? "cnn" : "dtypes");
    decoded = flow::serving::decode_infer_request(request.inputs, request.outputs, *model, "fuzz", kMaxBatchSize);
  } catch (const flow::Error&) {
    return 0;
  }
  check_decoded(decoded, *model);
  if (!request.outputs.empty() &&
      (decoded.outputs.size() != request.outputs.size() || request.binary_outputs.size() != request.outputs.size())) {
    flow_fuzz::invalid_accepted("the selected outputs differ from the requested ones");
  }
  flow::TensorList outputs;
  try {
    outputs = model->run(decoded.inputs);
  } catch (const flow::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    flow_fuzz::invalid_accepted("the model does not run on a decoded request");
  }
  const auto selected = flow::serving::select_outputs(*model, outputs, decoded.outputs);
  flow::serving::RestResponseBody response;
  try {
    response = flow::serving::rest_infer_response("fuzz", "1", request, selected);
  } catch (const flow::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    flow_fuzz::invalid_accepted("the response to an accepted request does not encode");
  }
  check_response(response, request, selected);
  return 0;
}
