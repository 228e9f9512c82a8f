#include "serving/model_config.h"

#include <google/protobuf/text_format.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace flow::serving {

config::ModelConfig read_model_config(const std::string& model_dir) {
  const std::filesystem::path path = std::filesystem::path(model_dir) / kModelConfigFile;
  config::ModelConfig config;
  if (std::filesystem::exists(path)) {
    std::ifstream file(path);
    std::stringstream text;
    text << file.rdbuf();
    if (!file || !google::protobuf::TextFormat::ParseFromString(text.str(), &config)) {
      fail("serving", path.string(), ": not a valid ModelConfig in protobuf text format");
    }
  }
  const std::string where = path.string();
  FLOW_ARG_CHECK(config.max_batch_size() >= 0, "serving", where, ": max_batch_size must be >= 0");
  FLOW_ARG_CHECK(config.max_queue_size() >= 0, "serving", where, ": max_queue_size must be >= 0");
  FLOW_ARG_CHECK(config.instance_group().count() >= 0, "serving", where, ": instance_group.count must be >= 0");
  FLOW_ARG_CHECK(config.instance_group().threads() >= 0, "serving", where, ": instance_group.threads must be >= 0");
  if (config.instance_group().count() == 0) config.mutable_instance_group()->set_count(1);
  if (config.version_policy().has_latest()) {
    FLOW_ARG_CHECK(config.version_policy().latest().num_versions() >= 1, "serving", where,
                   ": version_policy.latest.num_versions must be >= 1");
  }
  if (config.version_policy().has_specific()) {
    const auto& versions = config.version_policy().specific().versions();
    FLOW_ARG_CHECK(!versions.empty(), "serving", where, ": version_policy.specific lists no version");
    for (int64_t version : versions) {
      FLOW_ARG_CHECK(version >= 1, "serving", where, ": version_policy.specific.versions: ", version,
                     " is not a version (>= 1)");
    }
  }
  if (config.has_dynamic_batching()) {
    const auto& batching = config.dynamic_batching();
    FLOW_ARG_CHECK(config.max_batch_size() > 0, "serving", where, ": dynamic_batching needs max_batch_size > 0");
    FLOW_ARG_CHECK(batching.max_queue_delay_microseconds() >= 0, "serving", where,
                   ": max_queue_delay_microseconds must be >= 0");
    for (int64_t size : batching.preferred_batch_size()) {
      FLOW_ARG_CHECK(size >= 1 && size <= config.max_batch_size(), "serving", where, ": preferred_batch_size ", size,
                     " is not in [1, max_batch_size]");
    }
  }
  return config;
}

void check_model_config(const config::ModelConfig& config, const lite::Model& model, const std::string& model_label) {
  if (config.max_batch_size() > 0 && !model.dynamic_batch()) {
    fail("serving", model_label, ": max_batch_size ", config.max_batch_size(),
         " needs a model exported with a dynamic batch dimension (this one takes batch ", model.exported_batch(),
         " only)");
  }
}

}  // namespace flow::serving
