#pragma once
// Triton-compatible inference metrics (names and the model/version labels), kept in a
// prometheus-cpp registry that the server exposes as Prometheus text over HTTP.
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>

namespace flow::serving {

// The counters (and the pending-requests gauge) of one model version. Durations are cumulative microseconds, as in Triton;
// queue and compute durations add, per request, the time its batch waited and ran.
struct ModelMetrics {
  prometheus::Counter* request_success = nullptr;
  prometheus::Counter* request_failure = nullptr;
  prometheus::Counter* inference_count = nullptr;  // rows (batch elements) inferred
  prometheus::Counter* exec_count = nullptr;       // model runs (a merged batch counts once)
  prometheus::Counter* request_duration_us = nullptr;
  prometheus::Counter* queue_duration_us = nullptr;
  prometheus::Counter* compute_infer_duration_us = nullptr;
  prometheus::Gauge* pending_request_count = nullptr;  // requests queued, not yet running
};

class Metrics {
 public:
  Metrics();
  // The counters labelled {model=name, version=version}; the same ones on every call.
  ModelMetrics model(const std::string& name, const std::string& version);
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& request_success_;
  prometheus::Family<prometheus::Counter>& request_failure_;
  prometheus::Family<prometheus::Counter>& inference_count_;
  prometheus::Family<prometheus::Counter>& exec_count_;
  prometheus::Family<prometheus::Counter>& request_duration_us_;
  prometheus::Family<prometheus::Counter>& queue_duration_us_;
  prometheus::Family<prometheus::Counter>& compute_infer_duration_us_;
  prometheus::Family<prometheus::Gauge>& pending_request_count_;
};

}  // namespace flow::serving
