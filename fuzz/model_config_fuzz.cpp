// serving::read_model_config on any config.pbtxt. A flow::Error is a rejection. An accepted
// config satisfies the documented limits, and reads back the same when printed again.
#include <google/protobuf/text_format.h>

#include <cstdint>
#include <string_view>

#include "fuzz_util.h"
#include "quiet_protobuf.h"
#include "serving/model_config.h"

namespace {

void check_limits(const flow::serving::config::ModelConfig& config) {
  if (config.max_batch_size() < 0 || config.max_queue_size() < 0) flow_fuzz::invalid_accepted("a negative size");
  if (config.instance_group().count() < 1 || config.instance_group().threads() < 0) flow_fuzz::invalid_accepted("an instance group without instances");
  if (config.version_policy().has_latest() && config.version_policy().latest().num_versions() < 1) {
    flow_fuzz::invalid_accepted("latest of fewer than one version");
  }
  if (config.version_policy().has_specific()) {
    if (config.version_policy().specific().versions().empty()) flow_fuzz::invalid_accepted("specific versions listing none");
    for (int64_t version : config.version_policy().specific().versions()) {
      if (version < 1) flow_fuzz::invalid_accepted("a version below 1");
    }
  }
  if (config.has_dynamic_batching()) {
    if (config.max_batch_size() < 1 || config.dynamic_batching().max_queue_delay_microseconds() < 0) {
      flow_fuzz::invalid_accepted("dynamic batching without a batch size or with a negative delay");
    }
    for (int64_t size : config.dynamic_batching().preferred_batch_size()) {
      if (size < 1 || size > config.max_batch_size()) flow_fuzz::invalid_accepted("a preferred batch size outside [1, max_batch_size]");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto model_dir = flow_fuzz::scratch_dir() / "model";
  flow_fuzz::fs::create_directories(model_dir);
  const auto path = model_dir / flow::serving::kModelConfigFile;
  flow_fuzz::write_file(path, std::string_view(reinterpret_cast<const char*>(data), size));
  flow::serving::config::ModelConfig config;
  try {
    config = flow::serving::read_model_config(model_dir.string());
  } catch (const flow::Error&) {
    return 0;
  }
  check_limits(config);
  std::string printed;
  if (!google::protobuf::TextFormat::PrintToString(config, &printed)) flow_fuzz::invalid_accepted("an accepted config does not print");
  flow_fuzz::write_file(path, printed);
  try {
    if (flow::serving::read_model_config(model_dir.string()).SerializeAsString() != config.SerializeAsString()) {
      flow_fuzz::invalid_accepted("a printed config reads back differently");
    }
  } catch (const flow::Error&) {
    flow_fuzz::invalid_accepted("a printed config no longer reads");
  }
  return 0;
}
