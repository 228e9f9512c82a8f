#pragma once
// GPT-2 (Radford et al., 2019) with Hugging Face transformers' architecture and parameter names, so
// that its checkpoints load by name: transformer.wte.weight, transformer.h.0.attn.c_attn.weight,
// ... The defaults are GPT-2 small (124,439,808 parameters, the LM head tied to wte).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/kv_cache.h"
#include "nn/conv_norm.h"
#include "nn/modules.h"

namespace flow::models {

struct GPT2Config {
  GPT2Config& vocab_size(int64_t v) { vocab_size_ = v; return *this; }
  GPT2Config& n_positions(int64_t v) { n_positions_ = v; return *this; }
  GPT2Config& n_embd(int64_t v) { n_embd_ = v; return *this; }
  GPT2Config& n_layer(int64_t v) { n_layer_ = v; return *this; }
  GPT2Config& n_head(int64_t v) { n_head_ = v; return *this; }
  GPT2Config& layer_norm_epsilon(double v) { layer_norm_epsilon_ = v; return *this; }
  GPT2Config& resid_pdrop(double v) { resid_pdrop_ = v; return *this; }
  GPT2Config& embd_pdrop(double v) { embd_pdrop_ = v; return *this; }
  GPT2Config& attn_pdrop(double v) { attn_pdrop_ = v; return *this; }
  GPT2Config& initializer_range(double v) { initializer_range_ = v; return *this; }
  // Sets the three dropout probabilities at once (0 makes training deterministic).
  GPT2Config& dropout(double p) { resid_pdrop_ = embd_pdrop_ = attn_pdrop_ = p; return *this; }

  int64_t vocab_size_ = 50257;
  int64_t n_positions_ = 1024;  // the longest sequence (rows of wpe)
  int64_t n_embd_ = 768;
  int64_t n_layer_ = 12;
  int64_t n_head_ = 12;
  double layer_norm_epsilon_ = 1e-5;
  double resid_pdrop_ = 0.1;         // after each attention and MLP output projection
  double embd_pdrop_ = 0.1;          // after the token + position embeddings
  double attn_pdrop_ = 0.1;          // on the attention probabilities
  double initializer_range_ = 0.02;  // std of the normal initialisation
};

// Where one cached step's new tokens go and what they see, computed once per step from the rows'
// past lengths and shared by every layer (GPT2Model::forward_cached makes it).
struct CacheStep {
  Tensor write_index;  // (B, 1, T, 1) int64: the cache position of each new token (clamped to max_length - 1)
  // (B, 1, T, attend_length) in the hidden states' dtype, added to the attention scores: 0 where
  // cache position j is visible to new token t of row b, -inf where not. Made additive once here:
  // the bool form would be converted by every layer's attention.
  Tensor mask;
  int64_t attend_length = 0;  // the cache positions attention reads, from 0
  CacheUpdate update = CacheUpdate::kInPlace;
};

// OpenAI's "Conv1D": a linear layer whose weight is stored (in_features, out_features), so that
// y = x @ weight + bias; kept in this layout so that GPT-2 checkpoints load without transposing.
class Conv1D : public nn::Module {
 public:
  // Weight drawn from N(0, init_std^2), bias zero (Hugging Face's initialisation).
  Conv1D(int64_t in_features, int64_t out_features, double init_std);
  std::string name() const override { return "Conv1D"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;
  Tensor weight, bias;
};

// Causal multi-head self-attention: c_attn projects to queries, keys and values at once, each
// position attends to itself and the positions before it, c_proj mixes the heads.
class GPT2Attention : public nn::Module {
 public:
  explicit GPT2Attention(const GPT2Config& config);
  std::string name() const override { return "GPT2Attention"; }
  Tensor forward(const Tensor& hidden_states) override;  // (B, T, n_embd) -> (B, T, n_embd)
  // The new tokens' attention over a KV cache, on their hidden states as rows (B * T, n_embd), B
  // and T being step.write_index's: stores their keys and values in key_cache and value_cache
  // (B, n_head, max_length, head_dim) at step.write_index (kFunctional replaces the handles by
  // the new tensors), then attends over the first step.attend_length positions under step.mask.
  // Returns rows (B * T, n_embd).
  Tensor forward_cached(const Tensor& hidden_states, const CacheStep& step, Tensor& key_cache, Tensor& value_cache);
  std::shared_ptr<Conv1D> c_attn, c_proj;
  std::shared_ptr<nn::Dropout> attn_dropout, resid_dropout;

 private:
  int64_t n_embd_, n_head_;
};

// Position-wise feed-forward: n_embd -> 4 n_embd -> n_embd with GELU's tanh approximation (Hugging
// Face's "gelu_new" is the same formula).
class GPT2MLP : public nn::Module {
 public:
  explicit GPT2MLP(const GPT2Config& config);
  std::string name() const override { return "GPT2MLP"; }
  Tensor forward(const Tensor& hidden_states) override;
  std::shared_ptr<Conv1D> c_fc, c_proj;
  std::shared_ptr<nn::GELU> act;
  std::shared_ptr<nn::Dropout> dropout;
};

// Pre-norm residual block: x + attn(ln_1(x)), then + mlp(ln_2(.)).
class GPT2Block : public nn::Module {
 public:
  explicit GPT2Block(const GPT2Config& config);
  std::string name() const override { return "GPT2Block"; }
  Tensor forward(const Tensor& hidden_states) override;
  // On rows (B * T, n_embd), as GPT2Attention::forward_cached.
  Tensor forward_cached(const Tensor& hidden_states, const CacheStep& step, Tensor& key_cache, Tensor& value_cache);
  std::shared_ptr<nn::LayerNorm> ln_1, ln_2;
  std::shared_ptr<GPT2Attention> attn;
  std::shared_ptr<GPT2MLP> mlp;
};

// The transformer body: token and position embeddings, n_layer blocks, a final layer norm.
class GPT2Model : public nn::Module {
 public:
  explicit GPT2Model(const GPT2Config& config = {});
  std::string name() const override { return "GPT2Model"; }
  // input_ids: int64 (B, T) with T <= n_positions -> hidden states (B, T, n_embd).
  Tensor forward(const Tensor& input_ids) override;
  // forward over new tokens after each row's cached prefix (GPT2LMHeadModel::forward_cached):
  // hidden states (B, T, n_embd); cache's tensors are written (or replaced, kFunctional).
  Tensor forward_cached(const Tensor& input_ids, const Tensor& past_lengths, PastKeyValues& cache, int64_t attend_length,
                        CacheUpdate update);
  const GPT2Config& config() const { return config_; }
  // Hugging Face's gradient_checkpointing_enable(): in eager mode each block runs under
  // utils::checkpoint (nn/utils/checkpoint.h), so backward reruns it instead of keeping its
  // activations. A Graph ignores it (its build() is traced); checkpoint blocks there with
  // config().set_activation_checkpointing.
  void gradient_checkpointing_enable() { gradient_checkpointing_ = true; }
  void gradient_checkpointing_disable() { gradient_checkpointing_ = false; }
  bool is_gradient_checkpointing() const { return gradient_checkpointing_; }
  std::shared_ptr<nn::Embedding> wte, wpe;
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::ModuleList> h;
  std::vector<std::shared_ptr<GPT2Block>> blocks;  // the children of h, typed
  std::shared_ptr<nn::LayerNorm> ln_f;

 private:
  GPT2Config config_;
  bool gradient_checkpointing_ = false;
};

// Options of GPT2LMHeadModel::forward_cached, with chained setters.
struct CachedForwardOptions {
  // (B) int64: the tokens of each row of input_ids (any padding after them). When given, the
  // logits are only those of each row's last token, (B, vocab); otherwise of every position.
  Tensor input_lengths_;
  // The cache positions attention reads, [0, attend_length): at least every row's past length
  // plus T for the rows whose results are used. 0: all of max_length (the static shape a Graph
  // or an export keeps); eager decoding passes the longest row's so as not to read free space.
  int64_t attend_length_ = 0;
  CacheUpdate update_ = CacheUpdate::kInPlace;
  CachedForwardOptions& input_lengths(Tensor v) { input_lengths_ = std::move(v); return *this; }
  CachedForwardOptions& attend_length(int64_t v) { attend_length_ = v; return *this; }
  CachedForwardOptions& update(CacheUpdate v) { update_ = v; return *this; }
};

// What forward_cached returns (Hugging Face's CausalLMOutputWithPast).
struct CausalLMOutputWithPast {
  Tensor logits;                   // (B, T, vocab), or (B, vocab) with input_lengths
  PastKeyValues past_key_values;  // the cache after the step (the given tensors when kInPlace)
};

// GPT-2 with its language-modelling head. The head is wte itself (tied weights, as in Hugging
// Face), so it adds no parameter: logits = hidden @ wte.weight^T.
class GPT2LMHeadModel : public nn::Module {
 public:
  explicit GPT2LMHeadModel(const GPT2Config& config = {});
  std::string name() const override { return "GPT2LMHeadModel"; }
  // input_ids: int64 (B, T) -> logits (B, T, vocab_size).
  Tensor forward(const Tensor& input_ids) override;
  // One step of incremental decoding over a KV cache, a function of tensors only (so a Graph
  // traces it and an export keeps the cache as inputs and outputs): input_ids (B, T) int64 are new
  // tokens that follow each row's past_lengths[b] (B, int64) cached tokens. Token t of row b gets
  // position past_lengths[b] + t (for wpe and the cache; positions past max_length - 1 are
  // clamped there, so a row whose past plus T exceeds the cache must not be one whose results are
  // used); its key and value are written there, and it attends to cache positions
  // 0 ..= past_lengths[b] + t: the cached prefix and the new tokens up to itself, never positions
  // beyond the row's own. No host reads: lengths are data, so one traced step serves rows of any
  // lengths. The caller keeps the lengths (past_lengths + tokens used after the step).
  CausalLMOutputWithPast forward_cached(const Tensor& input_ids, const Tensor& past_lengths, PastKeyValues past_key_values,
                                        const CachedForwardOptions& options = {});
  // A KVCache shaped for this model, on its weights' device and dtype: batch_size rows of
  // max_length (<= n_positions) positions.
  std::shared_ptr<KVCache> make_cache(int64_t batch_size, int64_t max_length) const;
  // Mean next-token cross entropy of forward(input_ids) against labels (see causal_lm_loss).
  Tensor loss(const Tensor& input_ids, const Tensor& labels);
  // The transformer's switch (GPT2Model::gradient_checkpointing_enable).
  void gradient_checkpointing_enable() { transformer->gradient_checkpointing_enable(); }
  void gradient_checkpointing_disable() { transformer->gradient_checkpointing_disable(); }
  std::shared_ptr<GPT2Model> transformer;
};

// Next-token cross entropy as Hugging Face computes it: the logits at position t (B, T, V) are
// scored against labels[:, t + 1] (B, T) of int64, so labels may simply be the input ids; labels
// equal to -100 are ignored. Uses only traceable ops, so it works inside an nn::Graph's build().
Tensor causal_lm_loss(const Tensor& logits, const Tensor& labels);

}  // namespace flow::models
