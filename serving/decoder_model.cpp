#include "serving/decoder_model.h"

#include <glog/logging.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/ops/creation.h"

namespace flow::serving {
namespace {

namespace fs = std::filesystem;

DecoderSpec read_spec(const fs::path& file) {
  std::ifstream in(file);
  if (!in) fail("serving", file.string(), ": missing (not a decoder export?)");
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
    if (json.value("format", "") != "flow_decoder") fail("serving", file.string(), ": format is not \"flow_decoder\"");
    DecoderSpec spec;
    spec.vocab_size = json.at("vocab_size").get<int64_t>();
    spec.max_length = json.at("max_length").get<int64_t>();
    spec.prefill_length = json.at("prefill_length").get<int64_t>();
    spec.num_layers = json.at("num_layers").get<int64_t>();
    spec.eos_token_ids = json.at("eos_token_ids").get<std::vector<int64_t>>();
    spec.tokenizer = json.at("tokenizer").get<std::string>();
    if (spec.vocab_size < 1 || spec.max_length < 1 || spec.prefill_length < 1 || spec.num_layers < 1) {
      fail("serving", file.string(), ": sizes must be positive");
    }
    if (spec.tokenizer != "bytes" && spec.tokenizer != "none") fail("serving", file.string(), ": unknown tokenizer '", spec.tokenizer, "'");
    if (spec.tokenizer == "bytes" && spec.vocab_size < 256) fail("serving", file.string(), ": a bytes tokenizer needs vocab_size >= 256");
    const std::string update = json.value("cache_update", "");
    if (update != "in_place") {
      fail("serving", file.string(), ": cache_update is \"", update, "\"; flow_serve runs decoders that update their cache in place "
           "(export_decoder's default)");
    }
    return spec;
  } catch (const nlohmann::json::exception& e) {
    fail("serving", file.string(), ": ", e.what());
  }
}

// Checks one step export against the spec: its inputs and outputs, in order, with their dtypes
// and the step's token count.
void check_step(const lite::Model& model, const DecoderSpec& spec, int64_t tokens, const std::string& where) {
  std::vector<std::string> inputs{"input_ids", "past_lengths", "input_lengths"}, outputs{"logits"};
  for (int64_t i = 0; i < spec.num_layers; ++i) {
    for (const char* kind : {"keys_", "values_"}) inputs.push_back("past_" + std::string(kind) + std::to_string(i));
  }
  auto names = [](const std::vector<lite::TensorSpec>& specs) {
    std::vector<std::string> out;
    for (const auto& spec : specs) out.push_back(spec.name);
    return out;
  };
  if (names(model.inputs()) != inputs || names(model.outputs()) != outputs) {
    fail("serving", where, ": the inputs and outputs are not those of a decoder step (input_ids, past_lengths, input_lengths, past_keys_<i>, ... -> logits)");
  }
  if (!model.dynamic_batch()) fail("serving", where, ": a decoder step must take any batch size");
  const auto& ids = model.inputs()[0];
  if (ids.dtype != kInt64 || ids.shape.size() != 2 || ids.shape[1] != tokens) {
    fail("serving", where, ": input_ids must be int64 (batch, ", tokens, ")");
  }
  const auto& cache = model.inputs()[3].shape;
  if (cache.size() != 4 || cache[2] != spec.max_length) fail("serving", where, ": past_keys_0 must be (batch, heads, ", spec.max_length, ", head_dim)");
  const auto& logits = model.outputs()[0].shape;
  if (logits.size() != 2 || logits[1] != spec.vocab_size) fail("serving", where, ": logits must be (batch, ", spec.vocab_size, ")");
}

Tensor int64_tensor(std::vector<int64_t> values, Shape shape) { return tensor<int64_t>(values, std::move(shape)); }

}  // namespace

std::shared_ptr<const DecoderModel> DecoderModel::load(const std::string& dir) {
  const fs::path root(dir);
  DecoderSpec spec = read_spec(root / "generation.json");
  // No batch buckets: a padded batch would be a copy, and the steps write their cache inputs.
  const auto options = lite::LoadOptions().batch_buckets(false);
  auto prefill = lite::Model::load((root / "prefill").string(), options);
  auto decode = lite::Model::load((root / "decode").string(), options);
  check_step(*prefill, spec, spec.prefill_length, (root / "prefill").string());
  check_step(*decode, spec, 1, (root / "decode").string());
  return std::shared_ptr<const DecoderModel>(new DecoderModel(std::move(spec), std::move(prefill), std::move(decode)));
}

DecoderModel::DecoderModel(DecoderSpec spec, std::shared_ptr<const lite::Model> prefill, std::shared_ptr<const lite::Model> decode)
    : spec_(std::move(spec)), prefill_(std::move(prefill)), decode_(std::move(decode)) {}

std::vector<int64_t> DecoderModel::encode(const std::string& text) const {
  if (spec_.tokenizer != "bytes") fail("serving", "this model has no tokenizer: send token ids (input_ids), not text");
  std::vector<int64_t> tokens;
  for (unsigned char byte : text) tokens.push_back(byte);
  return tokens;
}

std::string DecoderModel::decode_text(const std::vector<int64_t>& tokens) const {
  if (spec_.tokenizer != "bytes") fail("serving", "this model has no tokenizer: its outputs are token ids");
  std::string text;
  // Ids above 255 (a vocabulary larger than the bytes) have no text.
  for (int64_t token : tokens) {
    if (token >= 0 && token < 256) text.push_back(static_cast<char>(token));
  }
  return text;
}

DecoderCache::DecoderCache(std::shared_ptr<const DecoderModel> model, int64_t slots) : model_(std::move(model)), slots_(slots) {
  if (slots < 1) fail("serving", "a decoder needs at least one slot, got ", slots);
  const auto& inputs = model_->decode_model()->inputs();
  for (int64_t i = 0; i < model_->spec().num_layers; ++i) {
    for (int kind = 0; kind < 2; ++kind) {
      const lite::TensorSpec& spec = inputs.at(static_cast<size_t>(3 + 2 * i + kind));
      std::vector<int64_t> shape = spec.shape;
      shape[0] = slots;
      (kind == 0 ? keys_ : values_).push_back(zeros(Shape(shape), TensorOptions(spec.dtype)));
    }
  }
}

Tensor DecoderCache::prefill(int64_t slot, const std::vector<int64_t>& prompt) {
  const DecoderSpec& spec = model_->spec();
  CHECK(slot >= 0 && slot < slots_) << "slot " << slot;
  CHECK(!prompt.empty() && static_cast<int64_t>(prompt.size()) <= spec.max_length) << "prompt of " << prompt.size();
  const int64_t chunk = spec.prefill_length, length = static_cast<int64_t>(prompt.size());
  // The slot's rows of the cache: contiguous views the steps write.
  TensorList cache;
  for (int64_t i = 0; i < spec.num_layers; ++i) cache.insert(cache.end(), {keys_[i].slice(0, slot, slot + 1), values_[i].slice(0, slot, slot + 1)});
  Tensor logits;
  for (int64_t start = 0; start < length; start += chunk) {
    const int64_t count = std::min(chunk, length - start);
    std::vector<int64_t> ids(static_cast<size_t>(chunk), 0);
    std::copy(prompt.begin() + start, prompt.begin() + start + count, ids.begin());
    TensorList inputs{int64_tensor(ids, {1, chunk}), int64_tensor({start}, {1}), int64_tensor({count}, {1})};
    inputs.insert(inputs.end(), cache.begin(), cache.end());
    logits = model_->prefill_model()->run(inputs)[0];
  }
  return logits;
}

Tensor DecoderCache::decode(const std::vector<int64_t>& tokens, const std::vector<int64_t>& lengths) {
  const auto rows = static_cast<int64_t>(tokens.size());
  CHECK(rows >= 1 && rows <= slots_) << rows << " rows";
  CHECK_EQ(static_cast<int64_t>(lengths.size()), rows);
  TensorList inputs{int64_tensor(tokens, {rows, 1}), int64_tensor(lengths, {rows}), int64_tensor(std::vector<int64_t>(tokens.size(), 1), {rows})};
  // The first rows of a cache are a contiguous view of it, written in place by the step.
  for (int64_t i = 0; i < model_->spec().num_layers; ++i) inputs.insert(inputs.end(), {keys_[i].slice(0, 0, rows), values_[i].slice(0, 0, rows)});
  const TensorList outputs = model_->decode_model()->run(inputs);
  return outputs[0];
}

}  // namespace flow::serving
