#pragma once
// What the server says about itself and its models, the same over gRPC and REST.
#include <string>

#include "serving/grpc_predict_v2.pb.h"
#include "serving/model_repository.h"
#include "serving/request_tracker.h"

namespace flow::serving {

inline constexpr const char* kServerName = "flow";
inline constexpr const char* kServerVersion = "0.1.0";
inline constexpr const char* kPlatform = "oneflow_lite";

// A served version's metadata (the newest when `version` is empty), with every served version
// listed. Throws ServingError(NOT_FOUND) for a model or version not served.
inference::ModelMetadataResponse model_metadata(const ModelRepository& repository, const std::string& name,
                                                const std::string& version);

// Ready unless shutting down; a model also only when that version is served.
bool server_ready(const RequestTracker& tracker);
bool model_ready(const ModelRepository& repository, const RequestTracker& tracker, const std::string& name,
                 const std::string& version);

}  // namespace flow::serving
