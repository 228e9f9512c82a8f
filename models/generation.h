#pragma once
// Text generation for causal language models, after Hugging Face's generate(): greedy or sampled
// (temperature, top-k, top-p: the logits processors of core/sampling.h), repetition penalty, stop
// tokens, max_new_tokens, seeded; batches
// of prompts of different lengths; over a KV cache (models/decoder.h), eagerly or through a
// compiled nn::Graph, or recomputing every sequence at each step (use_cache(false)).
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/random.h"
#include "core/sampling.h"
#include "models/decoder.h"
#include "models/gpt2.h"

namespace flow::models {

// Hugging Face's GenerationConfig, with its defaults and chained setters.
struct GenerationConfig {
  int64_t max_new_tokens_ = 20;  // tokens generated per row at most (0: none)
  bool do_sample_ = false;       // false: greedy (the likeliest token); true: drawn from the processed distribution
  double temperature_ = 1.0;     // sampling: logits divided by it (> 0)
  int64_t top_k_ = 50;           // sampling: only the k likeliest tokens (ties at the k-th kept); 0: all
  double top_p_ = 1.0;           // sampling: the smallest set of likeliest tokens whose mass reaches top_p, in (0, 1]
  double repetition_penalty_ = 1.0;  // > 0; tokens already in the row: positive logits divided by it, negative multiplied
  std::vector<int64_t> eos_token_id_;  // stop tokens: a row ends after generating one (it is kept)
  std::optional<int64_t> pad_token_id_;  // fills rows that ended early in the Tensor form of generate
  std::optional<uint64_t> seed_;  // sampling draws from a Generator of this seed; unset: the default generator
  bool use_cache_ = true;   // false: every step reruns the model over each whole sequence (no KV cache)
  bool use_graph_ = false;  // with the cache: the steps run as a compiled nn::Graph (models/decoder.h)

  GenerationConfig& max_new_tokens(int64_t v) { max_new_tokens_ = v; return *this; }
  GenerationConfig& do_sample(bool v) { do_sample_ = v; return *this; }
  GenerationConfig& temperature(double v) { temperature_ = v; return *this; }
  GenerationConfig& top_k(int64_t v) { top_k_ = v; return *this; }
  GenerationConfig& top_p(double v) { top_p_ = v; return *this; }
  GenerationConfig& repetition_penalty(double v) { repetition_penalty_ = v; return *this; }
  GenerationConfig& eos_token_id(int64_t v) { eos_token_id_ = {v}; return *this; }
  GenerationConfig& eos_token_id(std::vector<int64_t> v) { eos_token_id_ = std::move(v); return *this; }
  GenerationConfig& pad_token_id(int64_t v) { pad_token_id_ = v; return *this; }
  GenerationConfig& seed(uint64_t v) { seed_ = v; return *this; }
  GenerationConfig& use_cache(bool v) { use_cache_ = v; return *this; }
  GenerationConfig& use_graph(bool v) { use_graph_ = v; return *this; }
};

// Continues each prompt (token ids in [0, vocab), at least one) with the model as it is (in
// training mode its dropout applies: call eval() first) and returns the generated tokens
// of each row (without its prompt): max_new_tokens of them, or fewer when a stop token came (it
// ends the row). prompt + max_new_tokens must fit n_positions. Greedy, a batch generates what
// each prompt generates alone; sampled, each step draws every active row's token from its own
// distribution in one multinomial call (so a row's draws depend on its place in the batch), from
// seed's Generator: the same config and prompts give the same tokens. Errors are flow::Error
// "[generate] ...".
std::vector<std::vector<int64_t>> generate(const std::shared_ptr<GPT2LMHeadModel>& model, const std::vector<std::vector<int64_t>>& input_ids,
                                           const GenerationConfig& config = {});
// The same over an existing decoder (its slots 0..B-1 are reset and used; its Graph, if any, and
// compiled plans are reused across calls); config's use_cache and use_graph are the decoder's.
std::vector<std::vector<int64_t>> generate(CachedDecoder& decoder, const std::vector<std::vector<int64_t>>& input_ids,
                                           const GenerationConfig& config = {});
// Hugging Face's tensor form: input_ids (B, T) int64 -> (B, T + n) with each row's prompt and
// generated tokens, n the most any row generated; rows that ended early are padded with
// pad_token_id (needed then).
Tensor generate(const std::shared_ptr<GPT2LMHeadModel>& model, const Tensor& input_ids, const GenerationConfig& config = {});

}  // namespace flow::models
