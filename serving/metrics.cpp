#include "serving/metrics.h"

namespace flow::serving {
namespace {

prometheus::Family<prometheus::Counter>& counter(prometheus::Registry& registry, const std::string& name,
                                                 const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry);
}

}  // namespace

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      request_success_(counter(*registry_, "nv_inference_request_success", "Number of successful inference requests")),
      request_failure_(counter(*registry_, "nv_inference_request_failure",
                               "Number of failed inference requests, by reason (REJECTED: refused by the scheduler, "
                               "CANCELED: the client went, BACKEND: the model failed, OTHER: an invalid request)")),
      inference_count_(counter(*registry_, "nv_inference_count", "Number of inferences performed (batch elements)")),
      exec_count_(counter(*registry_, "nv_inference_exec_count", "Number of model executions (batches)")),
      request_duration_us_(counter(*registry_, "nv_inference_request_duration_us",
                                   "Cumulative inference request duration in microseconds")),
      queue_duration_us_(counter(*registry_, "nv_inference_queue_duration_us",
                                 "Cumulative inference queuing duration in microseconds")),
      compute_input_duration_us_(counter(*registry_, "nv_inference_compute_input_duration_us",
                                         "Cumulative compute input duration in microseconds")),
      compute_infer_duration_us_(counter(*registry_, "nv_inference_compute_infer_duration_us",
                                         "Cumulative compute inference duration in microseconds")),
      compute_output_duration_us_(counter(*registry_, "nv_inference_compute_output_duration_us",
                                          "Cumulative inference compute output duration in microseconds")),
      pending_request_count_(prometheus::BuildGauge()
                                 .Name("nv_inference_pending_request_count")
                                 .Help("Instantaneous number of pending requests awaiting execution per-model")
                                 .Register(*registry_)),
      first_response_ms_(prometheus::BuildHistogram()
                             .Name("nv_inference_first_response_histogram_ms")
                             .Help("Duration from request to first response in milliseconds (decoder models: the first token)")
                             .Register(*registry_)) {}

ModelMetrics Metrics::model(const std::string& name, const std::string& version) {
  const prometheus::Labels labels{{"model", name}, {"version", version}};
  ModelMetrics metrics;
  metrics.request_success = &request_success_.Add(labels);
  for (size_t reason = 0; reason < kFailureReasonNames.size(); ++reason) {
    prometheus::Labels with_reason = labels;
    with_reason["reason"] = kFailureReasonNames[reason];
    metrics.request_failure[reason] = &request_failure_.Add(with_reason);
  }
  metrics.inference_count = &inference_count_.Add(labels);
  metrics.exec_count = &exec_count_.Add(labels);
  metrics.request_duration_us = &request_duration_us_.Add(labels);
  metrics.queue_duration_us = &queue_duration_us_.Add(labels);
  metrics.compute_input_duration_us = &compute_input_duration_us_.Add(labels);
  metrics.compute_infer_duration_us = &compute_infer_duration_us_.Add(labels);
  metrics.compute_output_duration_us = &compute_output_duration_us_.Add(labels);
  metrics.pending_request_count = &pending_request_count_.Add(labels);
  metrics.first_response_ms =
      &first_response_ms_.Add(labels, prometheus::Histogram::BucketBoundaries{1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000});
  return metrics;
}

}  // namespace flow::serving
