#include "models/decoder_export.h"

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/ops/all.h"
#include "graph/export.h"

namespace flow::models {

DecoderStepGraph::DecoderStepGraph(std::shared_ptr<GPT2LMHeadModel> model, CacheUpdate update) : update_(update) {
  if (!model) fail("export_decoder", "no model");
  model_ = register_module("model", std::move(model));
  eval();
}

TensorList DecoderStepGraph::build(const TensorList& in) {
  const int64_t layers = model_->transformer->config().n_layer_;
  if (static_cast<int64_t>(in.size()) != 3 + 2 * layers) {
    fail("export_decoder", "the step takes ", 3 + 2 * layers, " inputs (input_ids, past_lengths, input_lengths, a key and a value cache per layer), got ",
         in.size());
  }
  PastKeyValues past;
  for (int64_t i = 0; i < layers; ++i) {
    past.keys.push_back(in[static_cast<size_t>(3 + 2 * i)]);
    past.values.push_back(in[static_cast<size_t>(4 + 2 * i)]);
  }
  const CausalLMOutputWithPast out = model_->forward_cached(in[0], in[1], past, CachedForwardOptions().input_lengths(in[2]).update(update_));
  TensorList outputs{out.logits};
  if (update_ == CacheUpdate::kInPlace) return outputs;
  for (int64_t i = 0; i < layers; ++i) outputs.insert(outputs.end(), {out.past_key_values.keys[i], out.past_key_values.values[i]});
  return outputs;
}

TensorList DecoderStepGraph::example_inputs(int64_t rows, int64_t tokens, int64_t max_length) const {
  const GPT2Config& config = model_->transformer->config();
  const TensorOptions ints = TensorOptions(kInt64);
  TensorList inputs{zeros({rows, tokens}, ints), zeros({rows}, ints), full({rows}, tokens, ints)};
  const Shape cache{rows, config.n_head_, max_length, config.n_embd_ / config.n_head_};
  for (int64_t i = 0; i < 2 * config.n_layer_; ++i) inputs.push_back(zeros(cache, TensorOptions(model_->transformer->wte->weight.dtype())));
  return inputs;
}

std::vector<std::string> DecoderStepGraph::input_names() const {
  std::vector<std::string> names{"input_ids", "past_lengths", "input_lengths"};
  for (int64_t i = 0; i < model_->transformer->config().n_layer_; ++i) {
    names.push_back("past_keys_" + std::to_string(i));
    names.push_back("past_values_" + std::to_string(i));
  }
  return names;
}

std::vector<std::string> DecoderStepGraph::output_names() const {
  std::vector<std::string> names{"logits"};
  if (update_ == CacheUpdate::kInPlace) return names;
  for (int64_t i = 0; i < model_->transformer->config().n_layer_; ++i) {
    names.push_back("present_keys_" + std::to_string(i));
    names.push_back("present_values_" + std::to_string(i));
  }
  return names;
}

void export_decoder(const std::shared_ptr<GPT2LMHeadModel>& model, const std::string& dir, const DecoderExportOptions& options) {
  if (!model) fail("export_decoder", "no model");
  const GPT2Config& config = model->transformer->config();
  const int64_t max_length = options.max_length_ == 0 ? config.n_positions_ : options.max_length_;
  if (max_length < 2 || max_length > config.n_positions_) fail("export_decoder", "max_length must be in [2, n_positions ", config.n_positions_, "], got ", max_length);
  if (options.prefill_length_ < 1 || options.prefill_length_ > max_length) {
    fail("export_decoder", "prefill_length must be in [1, max_length ", max_length, "], got ", options.prefill_length_);
  }
  if (options.tokenizer_ != "bytes" && options.tokenizer_ != "none") fail("export_decoder", "tokenizer must be \"bytes\" or \"none\", got \"", options.tokenizer_, "\"");
  if (options.tokenizer_ == "bytes" && config.vocab_size_ < 256) fail("export_decoder", "a bytes tokenizer needs vocab_size >= 256, got ", config.vocab_size_);
  for (int64_t id : options.eos_token_id_) {
    if (id < 0 || id >= config.vocab_size_) fail("export_decoder", "eos_token_id ", id, " is outside the vocabulary [0, ", config.vocab_size_, ")");
  }
  const std::filesystem::path root(dir);
  for (const auto& [name, tokens] : {std::pair<const char*, int64_t>{"prefill", options.prefill_length_}, {"decode", 1}}) {
    DecoderStepGraph step(model, options.cache_update_);
    // Traced at two rows: a batch of one would be confused with the decode step's one token.
    step(step.example_inputs(2, tokens, max_length));
    save(step, (root / name).string(), ExportOptions().input_names(step.input_names()).output_names(step.output_names()));
  }
  std::string eos;
  for (int64_t id : options.eos_token_id_) eos += (eos.empty() ? "" : ", ") + std::to_string(id);
  std::ofstream json(root / "generation.json");
  json << "{\"format\": \"flow_decoder\", \"vocab_size\": " << config.vocab_size_ << ", \"max_length\": " << max_length
       << ", \"prefill_length\": " << options.prefill_length_ << ", \"num_layers\": " << config.n_layer_ << ", \"eos_token_ids\": [" << eos
       << "], \"tokenizer\": \"" << options.tokenizer_ << "\", \"cache_update\": \""
       << (options.cache_update_ == CacheUpdate::kInPlace ? "in_place" : "functional") << "\"}\n";
  if (!json) fail("export_decoder", "cannot write ", (root / "generation.json").string());
}

}  // namespace flow::models
