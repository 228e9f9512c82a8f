#include "serving/rest_service.h"

#include "serving/generate_service.h"

#include <prometheus/text_serializer.h>

#include <future>

#include "serving/infer_call.h"
#include "serving/metadata.h"
#include "serving/rest_codec.h"
#include "serving/status.h"

namespace flow::serving {
namespace {

using nlohmann::json;

// /v2/models/{name} with an optional /versions/{version}: groups 1 and 2.
const std::string kModelPath = "/v2/models/([^/]+)(?:/versions/([^/]+))?";

void send_json(HttpResponse& response, const json& body) {
  response.status = 200;
  response.set_content(json_text(body), "application/json");
}

void send_status(HttpResponse& response, const grpc::Status& status) {
  send_error(response, http_status(status.error_code()), status.error_message());
}

json tensor_metadata_json(const inference::ModelMetadataResponse::TensorMetadata& tensor) {
  return {{"name", tensor.name()},
          {"datatype", tensor.datatype()},
          {"shape", std::vector<int64_t>(tensor.shape().begin(), tensor.shape().end())}};
}

json model_metadata_json(const inference::ModelMetadataResponse& metadata) {
  json inputs = json::array(), outputs = json::array();
  for (const auto& tensor : metadata.inputs()) inputs.push_back(tensor_metadata_json(tensor));
  for (const auto& tensor : metadata.outputs()) outputs.push_back(tensor_metadata_json(tensor));
  return {{"name", metadata.name()},
          {"versions", std::vector<std::string>(metadata.versions().begin(), metadata.versions().end())},
          {"platform", metadata.platform()},
          {"inputs", std::move(inputs)},
          {"outputs", std::move(outputs)}};
}

// Runs one inference on the calling (HTTP) thread: queued like a gRPC call, waited for here.
void infer(const HttpRequest& http_request, HttpResponse& http_response, ModelRepository& repository,
           RequestTracker& tracker) {
  if (!tracker.begin()) {
    send_error(http_response, 503, "[serving] the server is shutting down");
    return;
  }
  const AdmittedRequest admitted(tracker);
  const std::optional<std::string> header_length = http_request.header(kInferenceHeaderContentLength);
  RestBody body;
  RestInferRequest request;
  RestResponseBody answer;
  // Owned by the call too: the scheduler thread may still be inside set_value when this thread
  // has its answer and returns.
  auto done = std::make_shared<std::promise<grpc::Status>>();
  std::future<grpc::Status> status = done->get_future();

  InferCall call;
  call.model_name = http_request.matches[1];
  call.model_version = http_request.matches[2];
  call.decode = [&](const ServedModel& served) {
    body = parse_rest_body(http_request.body, header_length, served.label());
    request = rest_infer_request(body, served.label());
    return decode_infer_request(request.inputs, request.outputs, served.model(), served.label(),
                                served.config().max_batch_size());
  };
  // HTTP/1.1 gives no word of a client that went away until its answer is written.
  call.cancelled = [] { return false; };
  call.respond = [&](const ServedModel& served, std::vector<ResponseOutput> outputs) {
    answer = rest_infer_response(served.name(), served.version_string(), request, outputs);
  };
  call.finish = [done](const grpc::Status& result) { done->set_value(result); };
  start_infer(repository, std::move(call));
  const grpc::Status result = status.get();

  if (!result.ok()) {
    send_status(http_response, result);
    return;
  }
  http_response.status = 200;
  if (answer.header_length) {
    http_response.set_header(kInferenceHeaderContentLength, std::to_string(*answer.header_length));
  }
  http_response.set_content(std::move(answer.body), answer.content_type);
}

// `handler` behind the access policy: a call without the token is answered 401.
HttpEndpoint::Handler guarded(const AccessPolicy& access, bool health, HttpEndpoint::Handler handler) {
  return [&access, health, handler = std::move(handler)](const HttpRequest& request, HttpResponse& response) {
    const std::optional<std::string> authorization = request.header("Authorization");
    if (!access.allows(authorization ? std::optional<std::string_view>(*authorization) : std::nullopt, health)) {
      response.set_header("WWW-Authenticate", "Bearer");
      send_error(response, 401, "[serving] missing or wrong bearer token");
      return;
    }
    handler(request, response);
  };
}

}  // namespace

int http_status(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return 200;
    case grpc::StatusCode::NOT_FOUND:
      return 404;
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return 503;
    case grpc::StatusCode::INTERNAL:
      return 500;
    case grpc::StatusCode::UNIMPLEMENTED:
      return 501;
    default:
      return 400;
  }
}

void add_kserve_routes(HttpEndpoint& endpoint, ModelRepository& repository, RequestTracker& tracker,
                       const AccessPolicy& access) {
  using Runs = HttpEndpoint::Runs;
  const auto health = [&](const std::string& pattern, HttpEndpoint::Handler handler) {
    endpoint.route("GET", pattern, guarded(access, true, std::move(handler)), Runs::kOnIoThread);
  };
  const auto add = [&](const std::string& method, const std::string& pattern, Runs runs, HttpEndpoint::Handler handler) {
    endpoint.route(method, pattern, guarded(access, false, std::move(handler)), runs);
  };
  health("/v2/health/live", [](const HttpRequest&, HttpResponse& response) { response.status = 200; });
  // Not ready is 400, as Triton answers.
  health("/v2/health/ready", [&tracker](const HttpRequest&, HttpResponse& response) {
    if (server_ready(tracker)) {
      response.status = 200;
    } else {
      send_error(response, 400, "[serving] not ready: the server is shutting down");
    }
  });
  add("GET", "/v2", Runs::kOnIoThread, [](const HttpRequest&, HttpResponse& response) {
    send_json(response, {{"name", kServerName}, {"version", kServerVersion}, {"extensions", json::array({"binary_tensor_data", "model_repository", "generate"})}});
  });
  add("GET", kModelPath, Runs::kOnWorker, [&repository](const HttpRequest& request, HttpResponse& response) {
    try {
      send_json(response, model_metadata_json(model_metadata(repository, request.matches[1], request.matches[2])));
    } catch (const std::exception& error) {
      send_status(response, status_of(error));
    }
  });
  add("GET", kModelPath + "/ready", Runs::kOnWorker, [&repository, &tracker](const HttpRequest& request, HttpResponse& response) {
    if (model_ready(repository, tracker, request.matches[1], request.matches[2])) {
      response.status = 200;
    } else {
      const std::string version = request.matches[2];
      send_error(response, 400,
                 "[serving] model '" + request.matches[1] + "'" + (version.empty() ? "" : " version " + version) + " is not ready");
    }
  });
  add("POST", "/v2/repository/index", Runs::kOnWorker, [&repository](const HttpRequest& request, HttpResponse& response) {
    bool ready_only = false;
    if (!request.body.empty()) {
      const json body = json::parse(request.body, nullptr, false);
      if (!body.is_object() || (body.contains("ready") && !body["ready"].is_boolean())) {
        send_error(response, 400, "[serving] the repository index body must be a JSON object with an optional boolean 'ready'");
        return;
      }
      ready_only = body.value("ready", false);
    }
    json index = json::array();
    for (const auto& entry : repository.index(ready_only)) {
      json model = {{"name", entry.name}, {"state", entry.state}};
      if (!entry.version.empty()) model["version"] = entry.version;
      if (!entry.reason.empty()) model["reason"] = entry.reason;
      index.push_back(std::move(model));
    }
    send_json(response, index);
  });
  for (const auto& action : {std::pair{"load", &ModelRepository::load}, {"unload", &ModelRepository::unload}}) {
    // Not a structured binding: clang 14 cannot capture one.
    const auto call = action.second;
    add("POST", std::string("/v2/repository/models/([^/]+)/") + action.first, Runs::kOnWorker,
        [&repository, call](const HttpRequest& request, HttpResponse& response) {
          try {
            (repository.*call)(request.matches[1]);
            response.status = 200;
          } catch (const std::exception& error) {
            send_status(response, status_of(error));
          }
        });
  }
  add("POST", kModelPath + "/generate", Runs::kOnWorker, [&repository, &tracker](const HttpRequest& request, HttpResponse& response) {
    generate_over_http(request, response, repository, tracker, /*stream=*/false);
  });
  add("POST", kModelPath + "/generate_stream", Runs::kOnWorker, [&repository, &tracker](const HttpRequest& request, HttpResponse& response) {
    generate_over_http(request, response, repository, tracker, /*stream=*/true);
  });
  add("POST", kModelPath + "/infer", Runs::kOnWorker, [&repository, &tracker](const HttpRequest& request, HttpResponse& response) {
    infer(request, response, repository, tracker);
  });
}

void add_metrics_route(HttpEndpoint& endpoint, std::shared_ptr<prometheus::Registry> registry, const AccessPolicy& access) {
  endpoint.route("GET", "/metrics", guarded(access, true, [registry](const HttpRequest&, HttpResponse& response) {
                   response.status = 200;
                   response.set_content(prometheus::TextSerializer().Serialize(registry->Collect()),
                                        "text/plain; version=0.0.4; charset=utf-8");
                 }),
                 HttpEndpoint::Runs::kOnIoThread);
}

}  // namespace flow::serving
