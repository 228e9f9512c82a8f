#include "serving/inference_service.h"

#include "serving/datatype.h"
#include "serving/infer_codec.h"
#include "serving/status.h"

namespace flow::serving {
namespace {

inline constexpr const char* kServerName = "flow";
inline constexpr const char* kServerVersion = "0.1.0";
inline constexpr const char* kPlatform = "oneflow_lite";

grpc::ServerUnaryReactor* finish(grpc::CallbackServerContext* context, const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

void add_tensor_metadata(const lite::TensorSpec& spec, inference::ModelMetadataResponse::TensorMetadata* out) {
  out->set_name(spec.name);
  out->set_datatype(kserve_datatype(spec.dtype));
  for (int64_t dim : spec.shape) out->add_shape(dim);
}

uint64_t microseconds(Clock::duration duration) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(duration).count());
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

// What answering one ModelInfer call needs once its job has run.
struct InferCall {
  grpc::ServerUnaryReactor* reactor;
  const inference::ModelInferRequest* request;
  inference::ModelInferResponse* response;
  ServedModel* model;
  std::vector<size_t> selected_outputs;
  int64_t rows;  // inferences the call counts for (its batch, at least 1)
  Clock::time_point start;
};

// Fills the response, counts the call in the model's metrics and finishes it.
void finish_infer(const InferCall& call, const grpc::Status& status, const TensorList& outputs, const JobTimes& times) {
  grpc::Status answer = status;
  if (answer.ok()) {
    try {
      call.response->set_model_name(call.model->name());
      call.response->set_model_version(call.model->version_string());
      call.response->set_id(call.request->id());
      encode_infer_outputs(call.model->model(), outputs, call.selected_outputs, *call.response);
    } catch (const std::exception& error) {
      answer = grpc::Status(grpc::StatusCode::INTERNAL, call.model->label() + ": " + error.what());
    }
  }
  const ModelMetrics& metrics = call.model->metrics();
  if (answer.ok()) {
    metrics.request_success->Increment();
    metrics.inference_count->Increment(static_cast<double>(call.rows));
    metrics.queue_duration_us->Increment(static_cast<double>(microseconds(times.queue)));
    metrics.compute_infer_duration_us->Increment(static_cast<double>(microseconds(times.compute)));
    metrics.request_duration_us->Increment(static_cast<double>(microseconds(Clock::now() - call.start)));
  } else {
    metrics.request_failure->Increment();
  }
  call.reactor->Finish(answer);
}

}  // namespace

grpc::ServerUnaryReactor* InferenceService::ServerLive(grpc::CallbackServerContext* context,
                                                       const inference::ServerLiveRequest*,
                                                       inference::ServerLiveResponse* response) {
  response->set_live(true);
  return finish(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ServerReady(grpc::CallbackServerContext* context,
                                                        const inference::ServerReadyRequest*,
                                                        inference::ServerReadyResponse* response) {
  response->set_ready(!tracker_.draining());
  return finish(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelReady(grpc::CallbackServerContext* context,
                                                       const inference::ModelReadyRequest* request,
                                                       inference::ModelReadyResponse* response) {
  bool ready = !tracker_.draining();
  try {
    repository_.get(request->name(), request->version());
  } catch (const ServingError&) {
    ready = false;  // a readiness probe answers "not ready", not an error
  }
  response->set_ready(ready);
  return finish(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(grpc::CallbackServerContext* context,
                                                           const inference::ServerMetadataRequest*,
                                                           inference::ServerMetadataResponse* response) {
  response->set_name(kServerName);
  response->set_version(kServerVersion);
  return finish(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(grpc::CallbackServerContext* context,
                                                          const inference::ModelMetadataRequest* request,
                                                          inference::ModelMetadataResponse* response) {
  try {
    const std::shared_ptr<ServedModel> served = repository_.get(request->name(), request->version());
    response->set_name(served->name());
    for (const std::string& version : repository_.versions(served->name())) response->add_versions(version);
    response->set_platform(kPlatform);
    for (const auto& spec : served->model().inputs()) add_tensor_metadata(spec, response->add_inputs());
    for (const auto& spec : served->model().outputs()) add_tensor_metadata(spec, response->add_outputs());
    return finish(context, grpc::Status::OK);
  } catch (const std::exception& error) {
    return finish(context, status_of(error));
  }
}

grpc::ServerUnaryReactor* InferenceService::ModelInfer(grpc::CallbackServerContext* context,
                                                       const inference::ModelInferRequest* request,
                                                       inference::ModelInferResponse* response) {
  if (!tracker_.begin()) {
    return finish(context, grpc::Status(grpc::StatusCode::UNAVAILABLE, "[serving] the server is shutting down"));
  }
  const Clock::time_point start = Clock::now();
  grpc::ServerUnaryReactor* reactor = new TrackedReactor(tracker_);
  std::shared_ptr<ServedModel> served;
  try {
    served = repository_.get(request->model_name(), request->model_version());
    DecodedRequest decoded =
        decode_infer_request(*request, served->model(), served->label(), served->config().max_batch_size());
    auto job = std::make_unique<InferJob>();
    job->inputs = std::move(decoded.inputs);
    job->batch = decoded.batch;
    job->cancelled = [context] { return context->IsCancelled(); };
    // The served model outlives the job: its scheduler finishes every job before it goes.
    InferCall call{reactor, request, response, served.get(), std::move(decoded.outputs),
                   std::max<int64_t>(1, decoded.batch), start};
    job->done = [call = std::move(call)](const grpc::Status& status, const TensorList& outputs,
                                         const JobTimes& times) { finish_infer(call, status, outputs, times); };
    served->scheduler().submit(std::move(job));
  } catch (const std::exception& error) {
    if (served) served->metrics().request_failure->Increment();
    reactor->Finish(status_of(error));
  }
  return reactor;
}

}  // namespace flow::serving
