#include "serving/infer_call.h"

#include <memory>

#include "serving/status.h"

namespace flow::serving {
namespace {

// Fractional: whole microseconds truncated per request would lose the short phases.
double microseconds(Clock::duration duration) { return std::chrono::duration<double, std::micro>(duration).count(); }

// Triton's failure reasons: the scheduler refused it, the client went, the model failed, or
// anything else (an invalid request).
FailureReason failure_reason(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::UNAVAILABLE:
      return FailureReason::kRejected;
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return FailureReason::kCanceled;
    case grpc::StatusCode::INTERNAL:
      return FailureReason::kBackend;
    default:
      return FailureReason::kOther;
  }
}

// What answering a queued call needs once its job has run.
struct QueuedCall {
  InferCall call;
  // Not owned: the served model outlives the job (its scheduler finishes every job before it
  // goes), and a job must not own the scheduler whose thread runs it.
  ServedModel* model;
  std::vector<size_t> selected_outputs;
  int64_t rows;  // inferences the call counts for (its batch, at least 1)
  Clock::time_point start;
  Clock::duration decode;
};

// Fills the response, counts the call in the model's metrics and finishes it.
void finish_queued(const QueuedCall& queued, const grpc::Status& status, const TensorList& outputs,
                   const JobTimes& times) {
  grpc::Status answer = status;
  // gRPC drops the answer to a call whose client went or whose deadline passed while it ran:
  // it is a failure, not a success.
  if (answer.ok() && queued.call.cancelled()) {
    answer = grpc::Status(grpc::StatusCode::CANCELLED, "[serving] cancelled by the client, or its deadline passed, while it ran");
  }
  Clock::duration output_time{};
  if (answer.ok()) {
    const Clock::time_point output_start = Clock::now();
    try {
      queued.call.respond(*queued.model, select_outputs(queued.model->model(), outputs, queued.selected_outputs));
    } catch (const std::exception& error) {
      answer = grpc::Status(grpc::StatusCode::INTERNAL, queued.model->label() + ": " + error.what());
    }
    output_time = Clock::now() - output_start + times.output;
  }
  const ModelMetrics& metrics = queued.model->metrics();
  if (answer.ok()) {
    metrics.request_success->Increment();
    metrics.inference_count->Increment(static_cast<double>(queued.rows));
    metrics.queue_duration_us->Increment(microseconds(times.queue));
    metrics.compute_input_duration_us->Increment(microseconds(queued.decode + times.input));
    metrics.compute_infer_duration_us->Increment(microseconds(times.compute));
    metrics.compute_output_duration_us->Increment(microseconds(output_time));
    metrics.request_duration_us->Increment(microseconds(Clock::now() - queued.start));
  } else {
    metrics.count_failure(failure_reason(answer.error_code()));
  }
  queued.call.finish(answer);
}

}  // namespace

void start_infer(ModelRepository& repository, InferCall call) {
  const Clock::time_point start = Clock::now();
  std::shared_ptr<ServedModel> served;
  try {
    served = repository.get(call.model_name, call.model_version);
    DecodedRequest decoded = call.decode(*served);
    const Clock::duration decode = Clock::now() - start;
    auto job = std::make_unique<InferJob>();
    job->inputs = std::move(decoded.inputs);
    job->batch = decoded.batch;
    job->cancelled = call.cancelled;
    job->done = [queued = QueuedCall{call, served.get(), std::move(decoded.outputs),
                                     std::max<int64_t>(1, decoded.batch), start, decode}](
                    const grpc::Status& status, const TensorList& outputs, const JobTimes& times) {
      finish_queued(queued, status, outputs, times);
    };
    served->scheduler().submit(std::move(job));
  } catch (const std::exception& error) {
    const grpc::Status status = status_of(error);
    if (served) served->metrics().count_failure(failure_reason(status.error_code()));
    call.finish(status);
  }
}

}  // namespace flow::serving
