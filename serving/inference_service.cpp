#include "serving/inference_service.h"

#include "serving/datatype.h"
#include "serving/generate_service.h"
#include "serving/infer_call.h"
#include "serving/metadata.h"
#include "serving/status.h"
#include "serving/stream_infer.h"

namespace flow::serving {
namespace {

grpc::ServerUnaryReactor* finish(grpc::CallbackServerContext* context, const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

// The reactor of an admitted ModelInfer call: it leaves the tracker only once gRPC is done with
// the call (the answer sent), so that shutdown does not close the endpoint under an answer.
class TrackedReactor final : public grpc::ServerUnaryReactor {
 public:
  explicit TrackedReactor(RequestTracker& tracker) : tracker_(tracker) {}
  void OnDone() override {
    tracker_.end();
    delete this;
  }

 private:
  RequestTracker& tracker_;
};

// A stream refused before it starts (no token): finished at once, nothing read.
class RefusedStream final : public grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse> {
 public:
  void OnDone() override { delete this; }
};

// The call's model and how its inputs are decoded; `request` must outlive the call.
InferCall infer_call_for(const inference::ModelInferRequest* request) {
  InferCall call;
  call.model_name = request->model_name();
  call.model_version = request->model_version();
  call.decode = [request](const ServedModel& served) {
    std::vector<std::string> outputs;
    for (const auto& output : request->outputs()) outputs.push_back(output.name());
    return decode_infer_request(request_inputs(*request, served.label()), outputs, served.model(), served.label(),
                                served.config().max_batch_size());
  };
  return call;
}

void fill_infer_response(const inference::ModelInferRequest& request, const ServedModel& served, const std::vector<ResponseOutput>& outputs,
                         inference::ModelInferResponse& response) {
  response.set_model_name(served.name());
  response.set_model_version(served.version_string());
  response.set_id(request.id());
  for (const ResponseOutput& output : outputs) {
    auto* tensor = response.add_outputs();
    tensor->set_name(output.name);
    tensor->set_datatype(output.datatype);
    for (int64_t dim : output.tensor.shape()) tensor->add_shape(dim);
    response.add_raw_output_contents()->assign(output.bytes());
  }
}

}  // namespace

std::vector<RequestInput> request_inputs(const inference::ModelInferRequest& request, const std::string& model_label) {
  const bool raw = request.raw_input_contents_size() > 0;
  if (raw && request.raw_input_contents_size() != request.inputs_size()) {
    fail_status(grpc::StatusCode::INVALID_ARGUMENT, model_label, ": ", request.inputs_size(), " inputs but ",
                request.raw_input_contents_size(), " raw_input_contents");
  }
  std::vector<RequestInput> inputs;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const auto& input = request.inputs(i);
    if (raw && input.has_contents()) {
      fail_status(grpc::StatusCode::INVALID_ARGUMENT, model_label, ", input '", input.name(),
                  "': typed contents in a request using raw_input_contents");
    }
    RequestInput decoded{input.name(), input.datatype(), {input.shape().begin(), input.shape().end()}, {}, {}};
    if (raw) {
      decoded.raw = request.raw_input_contents(i);
    } else {
      decoded.typed = [&contents = input.contents()](DType dtype, int64_t count, const std::string& what) {
        return typed_contents_to_raw(contents, dtype, count, what);
      };
    }
    inputs.push_back(std::move(decoded));
  }
  return inputs;
}

std::optional<grpc::Status> InferenceService::refusal(const grpc::CallbackServerContext* context, bool health) const {
  const auto& metadata = context->client_metadata();
  const auto found = metadata.find("authorization");
  const std::optional<std::string_view> authorization =
      found == metadata.end() ? std::nullopt : std::optional<std::string_view>(std::string_view(found->second.data(), found->second.size()));
  if (access_.allows(authorization, health)) return std::nullopt;
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "[serving] missing or wrong bearer token");
}

grpc::ServerUnaryReactor* InferenceService::ServerLive(grpc::CallbackServerContext* context,
                                                       const inference::ServerLiveRequest*,
                                                       inference::ServerLiveResponse* response) {
  if (const auto refused = refusal(context, true)) return finish(context, *refused);
  response->set_live(true);
  return finish(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ServerReady(grpc::CallbackServerContext* context,
                                                        const inference::ServerReadyRequest*,
                                                        inference::ServerReadyResponse* response) {
  if (const auto refused = refusal(context, true)) return finish(context, *refused);
  response->set_ready(server_ready(tracker_));
  return finish(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelReady(grpc::CallbackServerContext* context,
                                                       const inference::ModelReadyRequest* request,
                                                       inference::ModelReadyResponse* response) {
  if (const auto refused = refusal(context, false)) return finish(context, *refused);
  response->set_ready(model_ready(repository_, tracker_, request->name(), request->version()));
  return finish(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(grpc::CallbackServerContext* context,
                                                           const inference::ServerMetadataRequest*,
                                                           inference::ServerMetadataResponse* response) {
  if (const auto refused = refusal(context, false)) return finish(context, *refused);
  response->set_name(kServerName);
  response->set_version(kServerVersion);
  response->add_extensions("model_repository");
  return finish(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(grpc::CallbackServerContext* context,
                                                          const inference::ModelMetadataRequest* request,
                                                          inference::ModelMetadataResponse* response) {
  if (const auto refused = refusal(context, false)) return finish(context, *refused);
  try {
    *response = model_metadata(repository_, request->name(), request->version());
    return finish(context, grpc::Status::OK);
  } catch (const std::exception& error) {
    return finish(context, status_of(error));
  }
}

grpc::ServerUnaryReactor* InferenceService::ModelInfer(grpc::CallbackServerContext* context,
                                                       const inference::ModelInferRequest* request,
                                                       inference::ModelInferResponse* response) {
  if (const auto refused = refusal(context, false)) return finish(context, *refused);
  if (!tracker_.begin()) {
    return finish(context, grpc::Status(grpc::StatusCode::UNAVAILABLE, "[serving] the server is shutting down"));
  }
  grpc::ServerUnaryReactor* reactor = new TrackedReactor(tracker_);
  InferCall call = infer_call_for(request);
  call.cancelled = [context] { return context->IsCancelled(); };
  call.respond = [request, response](const ServedModel& served, std::vector<ResponseOutput> outputs) {
    fill_infer_response(*request, served, outputs, *response);
  };
  call.finish = [reactor](const grpc::Status& status) { reactor->Finish(status); };
  start_infer(repository_, std::move(call));
  return reactor;
}

// A decoder model streams each request's tokens (serving/generate_service.h); other models run
// each request as ModelInfer would, one response with its outputs or its error.
grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>* InferenceService::ModelStreamInfer(
    grpc::CallbackServerContext* context) {
  if (const auto refused = refusal(context, false)) {
    auto* reactor = new RefusedStream();
    reactor->Finish(*refused);
    return reactor;
  }
  return start_stream_infer(tracker_, [this](std::shared_ptr<const inference::ModelInferRequest> request, std::shared_ptr<StreamResponder> responder) {
    try {
      if (start_stream_generation(*repository_.get(request->model_name(), request->model_version()), request, responder)) return;
    } catch (const ServingError&) {
      // An unknown model: the plain inference below answers with its error.
    }
    auto response = std::make_shared<inference::ModelStreamInferResponse>();
    // The request outlives the call: respond and finish below hold it.
    InferCall call = infer_call_for(request.get());
    call.cancelled = [responder] { return responder->cancelled(); };
    call.respond = [request, response](const ServedModel& served, std::vector<ResponseOutput> outputs) {
      fill_infer_response(*request, served, outputs, *response->mutable_infer_response());
    };
    call.finish = [request, response, responder](const grpc::Status& status) {
      if (!status.ok()) {
        response->Clear();
        response->set_error_message(status.error_message());
        response->mutable_infer_response()->set_model_name(request->model_name());
        response->mutable_infer_response()->set_id(request->id());
      }
      responder->send(std::move(*response), /*last=*/true);
    };
    start_infer(repository_, std::move(call));
  });
}

grpc::ServerUnaryReactor* InferenceService::RepositoryIndex(grpc::CallbackServerContext* context,
                                                            const inference::RepositoryIndexRequest* request,
                                                            inference::RepositoryIndexResponse* response) {
  if (const auto refused = refusal(context, false)) return finish(context, *refused);
  try {
    repository_.check_repository_name(request->repository_name());
    for (const auto& entry : repository_.index(request->ready())) {
      auto* model = response->add_models();
      model->set_name(entry.name);
      model->set_version(entry.version);
      model->set_state(entry.state);
      model->set_reason(entry.reason);
    }
    return finish(context, grpc::Status::OK);
  } catch (const std::exception& error) {
    return finish(context, status_of(error));
  }
}

namespace {

// Runs a load or unload request: the repository, no parameters (none is understood).
template <typename Request>
grpc::Status repository_call(ModelRepository& repository, const Request& request,
                             void (ModelRepository::*call)(const std::string&)) {
  try {
    repository.check_repository_name(request.repository_name());
    if (!request.parameters().empty()) {
      fail_status(grpc::StatusCode::INVALID_ARGUMENT, "model '", request.model_name(), "': parameters are not supported, got '",
                  request.parameters().begin()->first, "'");
    }
    (repository.*call)(request.model_name());
    return grpc::Status::OK;
  } catch (const std::exception& error) {
    return status_of(error);
  }
}

}  // namespace

grpc::ServerUnaryReactor* InferenceService::RepositoryModelLoad(grpc::CallbackServerContext* context,
                                                                const inference::RepositoryModelLoadRequest* request,
                                                                inference::RepositoryModelLoadResponse*) {
  if (const auto refused = refusal(context, false)) return finish(context, *refused);
  return finish(context, repository_call(repository_, *request, &ModelRepository::load));
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelUnload(grpc::CallbackServerContext* context,
                                                                  const inference::RepositoryModelUnloadRequest* request,
                                                                  inference::RepositoryModelUnloadResponse*) {
  if (const auto refused = refusal(context, false)) return finish(context, *refused);
  return finish(context, repository_call(repository_, *request, &ModelRepository::unload));
}

}  // namespace flow::serving
