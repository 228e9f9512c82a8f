#include "serving/served_model.h"

#include <filesystem>

namespace flow::serving {

std::shared_ptr<ServedModel> ServedModel::load(const std::string& name, int64_t version, const std::string& dir,
                                               const config::ModelConfig& config, Metrics& metrics) {
  std::shared_ptr<const DecoderModel> decoder;
  std::shared_ptr<const lite::Model> model;
  if (std::filesystem::exists(std::filesystem::path(dir) / "generation.json")) {
    decoder = DecoderModel::load(dir);
    model = decoder->decode_model();
  } else {
    model = lite::Model::load(dir);
  }
  check_model_config(config, *model, "model '" + name + "' version " + std::to_string(version));
  return std::shared_ptr<ServedModel>(new ServedModel(name, version, std::move(model), config, metrics, std::move(decoder)));
}

ServedModel::ServedModel(const std::string& name, int64_t version, std::shared_ptr<const lite::Model> model,
                         const config::ModelConfig& config, Metrics& metrics, std::shared_ptr<const DecoderModel> decoder)
    : name_(name),
      version_(version),
      version_string_(std::to_string(version)),
      label_("model '" + name + "' version " + version_string_),
      model_(std::move(model)),
      config_(config),
      metrics_(metrics.model(name_, version_string_)) {
  SchedulerOptions options;
  options.instances = config_.instance_group().count();
  options.threads_per_instance = config_.instance_group().threads();
  options.dynamic_batching = config_.has_dynamic_batching();
  options.max_batch_size = config_.max_batch_size();
  options.max_queue_delay = std::chrono::microseconds(config_.dynamic_batching().max_queue_delay_microseconds());
  options.preferred_batch_sizes.assign(config_.dynamic_batching().preferred_batch_size().begin(),
                                       config_.dynamic_batching().preferred_batch_size().end());
  options.max_queue_size = config_.max_queue_size();
  options.on_execution = [counter = metrics_.exec_count] { counter->Increment(); };
  options.on_queue_length = [gauge = metrics_.pending_request_count](size_t queued) {
    gauge->Set(static_cast<double>(queued));
  };
  scheduler_ = std::make_unique<Scheduler>(model_, std::move(options), label_);
  if (decoder) {
    // max_batch_size: the sequences decoded together; max_queue_size: those waiting for a slot.
    EngineOptions engine;
    if (config_.max_batch_size() > 0) engine.slots = config_.max_batch_size();
    if (config_.max_queue_size() > 0) engine.max_waiting = config_.max_queue_size();
    generation_ = std::make_unique<GenerationEngine>(std::move(decoder), engine, metrics_);
  }
}

}  // namespace flow::serving
