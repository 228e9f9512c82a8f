#include "serving/generate_service.h"

#include <future>
#include <nlohmann/json.hpp>
#include <sstream>

#include "serving/datatype.h"
#include "serving/rest_service.h"
#include "serving/status.h"

namespace flow::serving {
namespace {

using nlohmann::json;
const auto kInvalid = grpc::StatusCode::INVALID_ARGUMENT;

// A request's prompt and settings, whichever protocol carried them.
struct GenerateRequest {
  std::vector<int64_t> prompt;
  GenerationParams params;
};

int64_t integer_param(const json& value, const std::string& name) {
  if (!value.is_number_integer()) fail_status(kInvalid, "parameter '", name, "' must be an integer, got ", value.dump());
  return value.get<int64_t>();
}

double number_param(const json& value, const std::string& name) {
  if (!value.is_number()) fail_status(kInvalid, "parameter '", name, "' must be a number, got ", value.dump());
  return value.get<double>();
}

std::vector<int64_t> token_ids(const json& value, const std::string& name) {
  if (!value.is_array()) fail_status(kInvalid, "'", name, "' must be an array of token ids, got ", value.dump());
  std::vector<int64_t> ids;
  for (const json& id : value) ids.push_back(integer_param(id, name));
  return ids;
}

// The generation parameters among `fields` (a JSON object); other names are left to the caller.
void read_param(GenerationParams& params, const std::string& name, const json& value) {
  if (name == "max_tokens") {
    params.max_tokens = integer_param(value, name);
  } else if (name == "do_sample") {
    if (!value.is_boolean()) fail_status(kInvalid, "parameter 'do_sample' must be a boolean, got ", value.dump());
    params.sampling.do_sample = value.get<bool>();
  } else if (name == "temperature") {
    params.sampling.temperature = number_param(value, name);
  } else if (name == "top_k") {
    params.sampling.top_k = integer_param(value, name);
  } else if (name == "top_p") {
    params.sampling.top_p = number_param(value, name);
  } else if (name == "repetition_penalty") {
    params.sampling.repetition_penalty = number_param(value, name);
  } else if (name == "seed") {
    const int64_t seed = integer_param(value, name);
    if (seed < 0) fail_status(kInvalid, "parameter 'seed' must be >= 0, got ", seed);
    params.seed = static_cast<uint64_t>(seed);
  } else if (name == "stop_token_ids") {
    params.stop_token_ids = token_ids(value, name);
  } else if (name != "stream") {  // what streaming clients send along; the route decides here
    fail_status(kInvalid, "unknown parameter '", name, "'");
  }
}

GenerateRequest parse_rest(const std::string& body, const DecoderModel& model) {
  json request;
  try {
    request = json::parse(body);
  } catch (const json::exception& e) {
    fail_status(kInvalid, "the generate body is not JSON: ", e.what());
  }
  if (!request.is_object()) fail_status(kInvalid, "the generate body must be a JSON object");
  GenerateRequest out;
  bool has_prompt = false;
  for (const auto& [name, value] : request.items()) {
    if (name == "text_input") {
      if (!value.is_string()) fail_status(kInvalid, "'text_input' must be a string");
      out.prompt = model.encode(value.get<std::string>());
      has_prompt = true;
    } else if (name == "input_ids") {
      out.prompt = token_ids(value, name);
      has_prompt = true;
    } else if (name == "parameters") {
      if (!value.is_object()) fail_status(kInvalid, "'parameters' must be a JSON object");
      for (const auto& [param, param_value] : value.items()) read_param(out.params, param, param_value);
    } else {
      read_param(out.params, name, value);
    }
  }
  if (!has_prompt) fail_status(kInvalid, "the request has neither text_input nor input_ids");
  return out;
}

json parameter_json(const inference::InferParameter& parameter) {
  switch (parameter.parameter_choice_case()) {
    case inference::InferParameter::kBoolParam: return parameter.bool_param();
    case inference::InferParameter::kInt64Param: return parameter.int64_param();
    case inference::InferParameter::kDoubleParam: return parameter.double_param();
    case inference::InferParameter::kUint64Param: return parameter.uint64_param();
    case inference::InferParameter::kStringParam: {
      // stop_token_ids as text: "50256" or "1,2,3".
      json ids = json::array();
      std::stringstream text(parameter.string_param());
      for (std::string id; std::getline(text, id, ',');) {
        try {
          ids.push_back(std::stoll(id));
        } catch (const std::exception&) {
          return parameter.string_param();
        }
      }
      return ids;
    }
    default: return nullptr;
  }
}

GenerateRequest parse_grpc(const inference::ModelInferRequest& request, const DecoderModel& model, const std::string& label) {
  GenerateRequest out;
  for (const auto& [name, value] : request.parameters()) read_param(out.params, name, parameter_json(value));
  if (request.inputs_size() != 1) fail_status(kInvalid, label, ": a generate request has one input, text_input or input_ids");
  const auto& input = request.inputs(0);
  const bool raw = request.raw_input_contents_size() > 0;
  if (input.name() == "text_input") {
    if (input.datatype() != "BYTES") fail_status(kInvalid, label, ": text_input must be BYTES, got ", input.datatype());
    std::string text;
    if (raw) {
      // Raw BYTES: each element is a 4-byte little-endian length, then its bytes; one element.
      const std::string& bytes = request.raw_input_contents(0);
      if (bytes.size() < 4) fail_status(kInvalid, label, ": text_input holds no element");
      uint32_t length = 0;
      for (int i = 3; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
      if (bytes.size() != 4 + static_cast<size_t>(length)) fail_status(kInvalid, label, ": text_input must hold one element");
      text = bytes.substr(4);
    } else {
      if (input.contents().bytes_contents_size() != 1) fail_status(kInvalid, label, ": text_input must hold one element");
      text = input.contents().bytes_contents(0);
    }
    out.prompt = model.encode(text);
  } else if (input.name() == "input_ids") {
    if (input.datatype() != "INT64") fail_status(kInvalid, label, ": input_ids must be INT64, got ", input.datatype());
    if (raw) {
      const std::string& bytes = request.raw_input_contents(0);
      if (bytes.size() % sizeof(int64_t) != 0) fail_status(kInvalid, label, ": input_ids' raw contents are not whole int64s");
      out.prompt.resize(bytes.size() / sizeof(int64_t));
      std::memcpy(out.prompt.data(), bytes.data(), bytes.size());
    } else {
      out.prompt.assign(input.contents().int64_contents().begin(), input.contents().int64_contents().end());
    }
  } else {
    fail_status(kInvalid, label, ": unknown input '", input.name(), "' (text_input or input_ids)");
  }
  return out;
}

// Token bytes to text that is valid UTF-8 at every cut: a multi-byte character split over tokens
// is held back until it is whole.
class Utf8Joiner {
 public:
  std::string add(const std::string& bytes) {
    pending_ += bytes;
    size_t whole = pending_.size();
    // Back up over an unfinished sequence at the end (at most 3 bytes).
    for (size_t back = 1; back <= std::min<size_t>(3, pending_.size()); ++back) {
      const auto byte = static_cast<unsigned char>(pending_[pending_.size() - back]);
      if ((byte & 0xC0) != 0x80) {
        const size_t need = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 1;
        if (need > back) whole = pending_.size() - back;
        break;
      }
    }
    std::string out = pending_.substr(0, whole);
    pending_.erase(0, whole);
    return out;
  }
  std::string flush() { return std::exchange(pending_, std::string()); }

 private:
  std::string pending_;
};

// JSON text of `value`, with any invalid UTF-8 replaced (U+FFFD) rather than refused.
std::string json_text(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

// A text_output tensor holding one BYTES element (raw: a 4-byte little-endian length, then the
// bytes).
void add_text_output(inference::ModelInferResponse& response, const std::string& text) {
  auto& output = *response.add_outputs();
  output.set_name("text_output");
  output.set_datatype("BYTES");
  output.add_shape(1);
  std::string element(4, '\0');
  for (size_t i = 0; i < 4; ++i) element[i] = static_cast<char>((text.size() >> (8 * i)) & 0xFF);
  response.add_raw_output_contents()->assign(element + text);
}

json event_json(const ServedModel& served) { return {{"model_name", served.name()}, {"model_version", served.version_string()}}; }

}  // namespace

void generate_over_http(const HttpRequest& request, HttpResponse& response, ModelRepository& repository, RequestTracker& tracker, bool stream) {
  std::shared_ptr<ServedModel> served;
  GenerateRequest parsed;
  try {
    served = repository.get(request.matches[1], request.matches[2]);
    if (!served->generation()) fail_status(kInvalid, served->label(), " is not a decoder model: use /infer");
    parsed = parse_rest(request.body, served->generation()->model());
    served->generation()->check(parsed.prompt, parsed.params);
  } catch (const ServingError& error) {
    return send_error(response, http_status(error.code()), error.what());
  } catch (const Error& error) {
    return send_error(response, 400, error.what());
  }
  GenerationEngine& engine = *served->generation();
  const bool text = engine.model().spec().tokenizer == "bytes";
  const json head = event_json(*served);
  if (!tracker.begin()) return send_error(response, 503, "[serving] the server is shutting down");
  // In flight until the last holder (the handler, the stream's start, the sequence's callbacks)
  // lets go: also when the event stream never starts because the client is gone.
  auto admission = std::make_shared<AdmittedRequest>(tracker);

  if (!stream) {
    struct Outcome {
      std::vector<int64_t> tokens;
      FinishReason reason = FinishReason::kStop;
      std::string error;
    };
    auto outcome = std::make_shared<Outcome>();
    auto done = std::make_shared<std::promise<void>>();
    std::future<void> finished = done->get_future();
    try {
      engine.submit(std::move(parsed.prompt), parsed.params,
                    {[outcome](int64_t token) {
                       outcome->tokens.push_back(token);
                       return true;
                     },
                     [outcome, done](FinishReason reason, const std::string& error) {
                       outcome->reason = reason;
                       outcome->error = error;
                       done->set_value();
                     }});
    } catch (const ServingError& error) {
      return send_error(response, http_status(error.code()), error.what());
    }
    finished.wait();
    if (outcome->reason == FinishReason::kError || outcome->reason == FinishReason::kCancelled) {
      return send_error(response, outcome->reason == FinishReason::kError ? 500 : 503, "[serving] generation ended: " + outcome->error);
    }
    json body = head;
    if (text) body["text_output"] = engine.model().decode_text(outcome->tokens);
    body["output_ids"] = outcome->tokens;
    body["finish_reason"] = finish_reason_name(outcome->reason);
    response.set_content(json_text(body), "application/json");
    return;
  }

  // Validated; the sequence is queued once the event stream's head is out.
  response.set_header("Content-Type", "text/event-stream");
  response.set_header("Cache-Control", "no-cache");
  const DecoderModel* model = &engine.model();
  std::weak_ptr<ServedModel> weak = served;
  response.stream = [weak, model, text, head, admission, parsed = std::move(parsed)](std::shared_ptr<HttpStream> events) mutable {
    auto event = [events](const json& data) { return events->write("data: " + json_text(data) + "\n\n"); };
    auto served = weak.lock();
    try {
      if (!served) fail_status(grpc::StatusCode::UNAVAILABLE, "the model was unloaded");
      auto joiner = std::make_shared<Utf8Joiner>();
      served->generation()->submit(std::move(parsed.prompt), parsed.params,
                                   {[event, head, text, model, joiner](int64_t token) {
                                      json data = head;
                                      if (text) data["text_output"] = joiner->add(model->decode_text({token}));
                                      data["output_ids"] = {token};
                                      return event(data);
                                    },
                                    [event, events, head, text, joiner, admission](FinishReason reason, const std::string& error) {
                                      json data = head;
                                      if (text) data["text_output"] = joiner->flush();
                                      data["output_ids"] = json::array();
                                      data["finish_reason"] = finish_reason_name(reason);
                                      if (reason == FinishReason::kError) data["error"] = error;
                                      event(data);
                                      events->finish();
                                    }});
    } catch (const std::exception& error) {
      event({{"error", error.what()}});
      events->finish();
    }
  };
}

bool start_stream_generation(ServedModel& served, std::shared_ptr<const inference::ModelInferRequest> request,
                             std::shared_ptr<StreamResponder> responder) {
  GenerationEngine* engine = served.generation();
  if (!engine) return false;
  auto response_for = [name = served.name(), version = served.version_string(), id = request->id()]() {
    inference::ModelStreamInferResponse response;
    response.mutable_infer_response()->set_model_name(name);
    response.mutable_infer_response()->set_model_version(version);
    response.mutable_infer_response()->set_id(id);
    return response;
  };
  try {
    GenerateRequest parsed = parse_grpc(*request, engine->model(), served.label());
    const DecoderModel* model = &engine->model();
    const bool text = model->spec().tokenizer == "bytes";
    auto joiner = std::make_shared<Utf8Joiner>();
    engine->submit(std::move(parsed.prompt), parsed.params,
                   {[responder, response_for, model, text, joiner](int64_t token) {
                      inference::ModelStreamInferResponse response = response_for();
                      auto& infer = *response.mutable_infer_response();
                      if (text) add_text_output(infer, joiner->add(model->decode_text({token})));
                      auto& ids = *infer.add_outputs();
                      ids.set_name("output_ids");
                      ids.set_datatype("INT64");
                      ids.add_shape(1);
                      infer.add_raw_output_contents()->assign(reinterpret_cast<const char*>(&token), sizeof(token));
                      (*infer.mutable_parameters())["triton_final_response"].set_bool_param(false);
                      return responder->send(std::move(response), /*last=*/false);
                    },
                    [responder, response_for, text, joiner](FinishReason reason, const std::string& error) {
                      inference::ModelStreamInferResponse response = response_for();
                      if (text) add_text_output(*response.mutable_infer_response(), joiner->flush());
                      if (reason == FinishReason::kError) response.set_error_message(error);
                      auto& parameters = *response.mutable_infer_response()->mutable_parameters();
                      parameters["triton_final_response"].set_bool_param(true);
                      parameters["finish_reason"].set_string_param(finish_reason_name(reason));
                      responder->send(std::move(response), /*last=*/true);
                    }});
  } catch (const std::exception& error) {
    inference::ModelStreamInferResponse response = response_for();
    response.set_error_message(error.what());
    (*response.mutable_infer_response()->mutable_parameters())["triton_final_response"].set_bool_param(true);
    responder->send(std::move(response), /*last=*/true);
  }
  return true;
}

}  // namespace flow::serving
