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
      request_failure_(counter(*registry_, "nv_inference_request_failure", "Number of failed inference requests")),
      inference_count_(counter(*registry_, "nv_inference_count", "Number of inferences performed (batch elements)")),
      exec_count_(counter(*registry_, "nv_inference_exec_count", "Number of model executions (batches)")),
      request_duration_us_(counter(*registry_, "nv_inference_request_duration_us",
                                   "Cumulative inference request duration in microseconds")),
      queue_duration_us_(counter(*registry_, "nv_inference_queue_duration_us",
                                 "Cumulative inference queuing duration in microseconds")),
      compute_infer_duration_us_(counter(*registry_, "nv_inference_compute_infer_duration_us",
                                         "Cumulative compute inference duration in microseconds")),
      pending_request_count_(prometheus::BuildGauge()
                                 .Name("nv_inference_pending_request_count")
                                 .Help("Instantaneous number of pending requests awaiting execution per-model")
                                 .Register(*registry_)) {}

ModelMetrics Metrics::model(const std::string& name, const std::string& version) {
  const prometheus::Labels labels{{"model", name}, {"version", version}};
  return {&request_success_.Add(labels),     &request_failure_.Add(labels),   &inference_count_.Add(labels),
          &exec_count_.Add(labels),          &request_duration_us_.Add(labels), &queue_duration_us_.Add(labels),
          &compute_infer_duration_us_.Add(labels), &pending_request_count_.Add(labels)};
}

}  // namespace flow::serving
