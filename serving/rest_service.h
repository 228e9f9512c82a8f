#pragma once
// The KServe v2 REST protocol, as Triton answers it, on an HttpEndpoint: health, server and model
// metadata, model readiness and inference (JSON tensors and Triton's binary tensor data). Errors
// carry the gRPC side's messages in a JSON {"error": ...} body, with Triton's HTTP statuses
// (http_status). Inference goes through the same validation, scheduler and metrics as gRPC.
// Also the Prometheus metrics route.
#include <grpcpp/support/status.h>
#include <prometheus/registry.h>

#include <memory>

#include "serving/http_endpoint.h"
#include "serving/model_repository.h"
#include "serving/request_tracker.h"
#include "serving/security.h"

namespace flow::serving {

// Triton's HTTP status for an error: NOT_FOUND 404; UNAVAILABLE and RESOURCE_EXHAUSTED (a full
// queue, which Triton reports as unavailable) 503; INTERNAL 500; UNIMPLEMENTED 501; the rest 400.
int http_status(grpc::StatusCode code);

// GET /v2/health/live, /v2/health/ready, /v2, /v2/models/{name}[/versions/{version}] and its
// /ready; POST /v2/models/{name}[/versions/{version}]/infer, and for decoder models /generate and
// /generate_stream (serving/generate_service.h).
// Every route checks `access` (which must outlive the endpoint): without the bearer token, 401.
void add_kserve_routes(HttpEndpoint& endpoint, ModelRepository& repository, RequestTracker& tracker,
                       const AccessPolicy& access);

// GET /metrics: the registry in the Prometheus text format.
void add_metrics_route(HttpEndpoint& endpoint, std::shared_ptr<prometheus::Registry> registry, const AccessPolicy& access);

}  // namespace flow::serving
