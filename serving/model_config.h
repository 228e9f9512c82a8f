#pragma once
// The optional per-model configuration file <repository>/<model>/config.pbtxt (protobuf text
// format, message flow.serving.config.ModelConfig in proto/model_config.proto), e.g.
//   max_batch_size: 8
//   dynamic_batching { max_queue_delay_microseconds: 2000 preferred_batch_size: [4, 8] }
//   instance_group { count: 2 threads: 4 }
//   max_queue_size: 128
//   version_policy { latest { num_versions: 1 } }
#include <string>

#include "oneflow_lite/model.h"
#include "serving/model_config.pb.h"

namespace flow::serving {

inline constexpr const char* kModelConfigFile = "config.pbtxt";

// Reads <model_dir>/config.pbtxt; the defaults (no batching, one instance, unbounded queue, every
// version served) when there is none. Throws flow::Error naming the file for a syntax error or an invalid value.
config::ModelConfig read_model_config(const std::string& model_dir);

// Checks the config against a loaded model: batching needs a model exported with a dynamic batch
// dimension. Throws flow::Error naming the model.
void check_model_config(const config::ModelConfig& config, const lite::Model& model, const std::string& model_label);

}  // namespace flow::serving
