#pragma once
// Deploy export of a GPT-2 language model for incremental decoding: the cached step with its KV
// cache as explicit inputs and outputs, written as two oneflow_lite exports (a prefill step over a
// fixed number of tokens and the one-token decode step) and generation.json, the layout flow_serve
// serves as a decoder model. Also the step as an nn::Graph, for ONNX export.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "models/gpt2.h"

namespace flow::models {

struct DecoderExportOptions {
  int64_t max_length_ = 0;      // cache positions per sequence; 0: n_positions
  int64_t prefill_length_ = 16;  // tokens of one prefill step (a longer prompt runs in several)
  std::vector<int64_t> eos_token_id_;  // the default stop tokens of served requests
  std::string tokenizer_ = "none";     // "bytes": text is UTF-8 bytes, token id = byte (vocab >= 256)
  // kInPlace (oneflow_lite): each step writes the new keys and values into its cache inputs, the
  // caller's tensors, and outputs only the logits. kFunctional: the caches are outputs too, new
  // tensors (a full copy per step), the form ONNX can express (flow_onnx_export converts it).
  CacheUpdate cache_update_ = CacheUpdate::kInPlace;
  DecoderExportOptions& max_length(int64_t v) { max_length_ = v; return *this; }
  DecoderExportOptions& prefill_length(int64_t v) { prefill_length_ = v; return *this; }
  DecoderExportOptions& eos_token_id(std::vector<int64_t> v) { eos_token_id_ = std::move(v); return *this; }
  DecoderExportOptions& tokenizer(std::string v) { tokenizer_ = std::move(v); return *this; }
  DecoderExportOptions& cache_update(CacheUpdate v) { cache_update_ = v; return *this; }
};

// The cached step as an inference Graph: inputs input_ids (B, T) int64, past_lengths (B) int64,
// input_lengths (B) int64 (the real tokens of each row; padding after them; a step of one token per
// row, the decode step, has no padding and leaves it unread), then past_keys_<i> and
// past_values_<i> (B, n_head, max_length, head_dim) per layer; outputs the logits of each row's
// last real token (B, vocab), then (kFunctional) present_keys_<i> and present_values_<i>, the
// caches with the step's tokens written at past_lengths[b] + t; kInPlace writes them into the
// cache inputs instead (GPT2LMHeadModel::forward_cached).
class DecoderStepGraph : public nn::Graph {
 public:
  explicit DecoderStepGraph(std::shared_ptr<GPT2LMHeadModel> model, CacheUpdate update = CacheUpdate::kFunctional);
  TensorList build(const TensorList& inputs) override;
  // Inputs for one call: token ids (rows, tokens), zero lengths and empty caches of max_length.
  TensorList example_inputs(int64_t rows, int64_t tokens, int64_t max_length) const;
  // The names of the inputs and outputs above, in order.
  std::vector<std::string> input_names() const;
  std::vector<std::string> output_names() const;

 private:
  std::shared_ptr<GPT2LMHeadModel> model_;
  CacheUpdate update_;
};

// Writes <dir>/generation.json, <dir>/prefill and <dir>/decode (flow::save exports with a dynamic
// batch; the cache written as options.cache_update says). The model is put in eval mode. Errors are flow::Error "[export_decoder] ...".
void export_decoder(const std::shared_ptr<GPT2LMHeadModel>& model, const std::string& dir, const DecoderExportOptions& options = {});

}  // namespace flow::models
