#pragma once
// One loaded version of a model: the oneflow_lite model, its config, its metrics and the
// scheduler that runs its requests. A decoder language model (a directory with generation.json,
// serving/decoder_model.h) also has a generation engine; its lite model is the decode step.
#include <cstdint>
#include <memory>
#include <string>

#include "oneflow_lite/model.h"
#include "serving/metrics.h"
#include "serving/model_config.h"
#include "serving/generation_engine.h"
#include "serving/scheduler.h"

namespace flow::serving {

class ServedModel {
 public:
  // Loads the export directory `dir` as version `version` of model `name`. Throws flow::Error
  // when the export does not load or the config does not fit the model.
  static std::shared_ptr<ServedModel> load(const std::string& name, int64_t version, const std::string& dir,
                                           const config::ModelConfig& config, Metrics& metrics);
  // Finishes every queued request first.
  ~ServedModel() = default;

  const std::string& name() const { return name_; }
  int64_t version() const { return version_; }
  const std::string& version_string() const { return version_string_; }
  // "model 'name' version N", the prefix of every error about this model.
  const std::string& label() const { return label_; }
  const lite::Model& model() const { return *model_; }
  const config::ModelConfig& config() const { return config_; }
  const ModelMetrics& metrics() const { return metrics_; }
  Scheduler& scheduler() { return *scheduler_; }
  // The generation engine of a decoder model; null for other models.
  GenerationEngine* generation() { return generation_.get(); }

 private:
  ServedModel(const std::string& name, int64_t version, std::shared_ptr<const lite::Model> model,
              const config::ModelConfig& config, Metrics& metrics, std::shared_ptr<const DecoderModel> decoder);

  std::string name_;
  int64_t version_;
  std::string version_string_;
  std::string label_;
  std::shared_ptr<const lite::Model> model_;
  config::ModelConfig config_;
  ModelMetrics metrics_;
  // Declared last: destroyed first, so queued requests finish (sequences are cancelled) while the
  // rest is alive.
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<GenerationEngine> generation_;
};

}  // namespace flow::serving
