#include "serving/metadata.h"

#include "serving/datatype.h"
#include "serving/status.h"

namespace flow::serving {
namespace {

void add_tensor_metadata(const lite::TensorSpec& spec, inference::ModelMetadataResponse::TensorMetadata* out) {
  out->set_name(spec.name);
  out->set_datatype(kserve_datatype(spec.dtype));
  for (int64_t dim : spec.shape) out->add_shape(dim);
}

}  // namespace

inference::ModelMetadataResponse model_metadata(const ModelRepository& repository, const std::string& name,
                                                const std::string& version) {
  const std::shared_ptr<ServedModel> served = repository.get(name, version);
  inference::ModelMetadataResponse metadata;
  metadata.set_name(served->name());
  for (const std::string& served_version : repository.versions(served->name())) metadata.add_versions(served_version);
  metadata.set_platform(kPlatform);
  for (const auto& spec : served->model().inputs()) add_tensor_metadata(spec, metadata.add_inputs());
  for (const auto& spec : served->model().outputs()) add_tensor_metadata(spec, metadata.add_outputs());
  return metadata;
}

bool server_ready(const RequestTracker& tracker) { return !tracker.draining(); }

bool model_ready(const ModelRepository& repository, const RequestTracker& tracker, const std::string& name,
                 const std::string& version) {
  try {
    repository.get(name, version);
  } catch (const ServingError&) {
    return false;  // a readiness probe answers "not ready", not an error
  }
  return server_ready(tracker);
}

}  // namespace flow::serving
