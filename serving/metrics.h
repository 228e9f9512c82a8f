#pragma once
// Triton-compatible inference metrics (names and the model/version labels), kept in a
// prometheus-cpp registry that the server exposes as Prometheus text over HTTP.
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <memory>
#include <string>

namespace flow::serving {

// Why a request failed: Triton's `reason` label of nv_inference_request_failure.
enum class FailureReason { kRejected, kCanceled, kBackend, kOther };
inline constexpr std::array<const char*, 4> kFailureReasonNames{"REJECTED", "CANCELED", "BACKEND", "OTHER"};

// The counters (and the pending-requests gauge) of one model version. Durations are cumulative
// microseconds of successful requests, as in Triton; a request counts the whole time of the batch
// it ran in for queue, compute input, compute infer and compute output.
struct ModelMetrics {
  prometheus::Counter* request_success = nullptr;
  std::array<prometheus::Counter*, 4> request_failure{};  // by FailureReason
  prometheus::Counter* inference_count = nullptr;  // rows (batch elements) inferred
  prometheus::Counter* exec_count = nullptr;       // model runs (a merged batch counts once)
  prometheus::Counter* request_duration_us = nullptr;
  prometheus::Counter* queue_duration_us = nullptr;
  // Decoding the request's tensors out of the message (for REST, parsing its JSON too) and
  // merging the batch.
  prometheus::Counter* compute_input_duration_us = nullptr;
  prometheus::Counter* compute_infer_duration_us = nullptr;  // the model run
  // Splitting the batch's outputs and writing the request's into its response.
  prometheus::Counter* compute_output_duration_us = nullptr;
  prometheus::Gauge* pending_request_count = nullptr;  // requests queued, not yet running
  // Decoder models (streamed, Triton's "decoupled"): milliseconds from a request's arrival to its
  // first generated token. Their nv_inference_count counts generated tokens.
  prometheus::Histogram* first_response_ms = nullptr;

  void count_failure(FailureReason reason) const { request_failure[static_cast<size_t>(reason)]->Increment(); }
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
  prometheus::Family<prometheus::Counter>& compute_input_duration_us_;
  prometheus::Family<prometheus::Counter>& compute_infer_duration_us_;
  prometheus::Family<prometheus::Counter>& compute_output_duration_us_;
  prometheus::Family<prometheus::Gauge>& pending_request_count_;
  prometheus::Family<prometheus::Histogram>& first_response_ms_;
};

}  // namespace flow::serving
