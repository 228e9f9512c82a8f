#pragma once
// A served decoder language model: the directory flow::models::export_decoder writes, two
// oneflow_lite exports of one cached step and a description of them:
//   generation.json  {"format": "flow_decoder", "vocab_size", "max_length", "prefill_length",
//                     "num_layers", "eos_token_ids": [...], "tokenizer": "bytes" | "none",
//                     "cache_update": "in_place"}
//   prefill/, decode/  the step over prefill_length tokens and over one token. Inputs: input_ids
//                     (B, T) int64, past_lengths (B) int64, input_lengths (B) int64, then
//                     past_keys_<i> and past_values_<i> (B, heads, max_length, head_dim) per layer,
//                     which the step updates in place (the step's tokens written at
//                     past_lengths[b] + t); output: logits (B, vocab) of each row's last input
//                     token. (The "functional" form, caches returned as new tensors, is for ONNX
//                     and is not served.)
// DecoderCache holds the keys and values of a fixed number of rows ("slots") between steps.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "oneflow_lite/model.h"

namespace flow::serving {

struct DecoderSpec {
  int64_t vocab_size = 0;
  int64_t max_length = 0;      // tokens a sequence may hold: prompt and generated
  int64_t prefill_length = 0;  // tokens of one prefill step (a prompt runs in steps of this many)
  int64_t num_layers = 0;
  std::vector<int64_t> eos_token_ids;
  std::string tokenizer;  // "bytes": text is its UTF-8 bytes, one token each; "none": token ids only
};

class DecoderModel {
 public:
  // Loads and checks the directory. Throws flow::Error "[serving] <dir>: ..." when a file is
  // missing or the exports do not have the inputs and outputs above.
  static std::shared_ptr<const DecoderModel> load(const std::string& dir);

  const DecoderSpec& spec() const { return spec_; }
  // The steps' exports; the decode step's inputs and outputs describe the model.
  const std::shared_ptr<const lite::Model>& decode_model() const { return decode_; }
  const std::shared_ptr<const lite::Model>& prefill_model() const { return prefill_; }

  // Text to token ids and back, for a "bytes" tokenizer (flow::Error for "none").
  std::vector<int64_t> encode(const std::string& text) const;
  std::string decode_text(const std::vector<int64_t>& tokens) const;

 private:
  DecoderModel(DecoderSpec spec, std::shared_ptr<const lite::Model> prefill, std::shared_ptr<const lite::Model> decode);
  DecoderSpec spec_;
  std::shared_ptr<const lite::Model> prefill_, decode_;
};

// The keys and values of `slots` sequences, and the steps that extend them.
class DecoderCache {
 public:
  DecoderCache(std::shared_ptr<const DecoderModel> model, int64_t slots);
  int64_t slots() const { return slots_; }

  // Runs `prompt` (at most max_length tokens) into slot `slot` from position 0, in steps of
  // prefill_length, the slot's rows of the cache updated in place; returns the logits after its
  // last token, (1, vocab).
  Tensor prefill(int64_t slot, const std::vector<int64_t>& prompt);
  // One token for each of the first tokens.size() slots at once: tokens[s] at position lengths[s]
  // (free slots among them pass any token at 0). Returns (tokens.size(), vocab) logits.
  Tensor decode(const std::vector<int64_t>& tokens, const std::vector<int64_t>& lengths);

 private:
  std::shared_ptr<const DecoderModel> model_;
  int64_t slots_;
  TensorList keys_, values_;  // per layer (slots, heads, max_length, head_dim)
};

}  // namespace flow::serving
