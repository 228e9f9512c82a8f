#include "models/gpt2.h"

#include <cmath>

#include "core/error.h"
#include "core/grad_mode.h"
#include "core/ops/all.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "nn/utils/checkpoint.h"

namespace flow::models {
namespace {

std::shared_ptr<nn::LayerNorm> layer_norm(const GPT2Config& config) {
  return std::make_shared<nn::LayerNorm>(std::vector<int64_t>{config.n_embd_}, config.layer_norm_epsilon_);
}

// GPT-2 scales the output projections of the residual branches by 1/sqrt(2 n_layer) at
// initialisation, so that the residual stream's variance does not grow with depth.
double residual_projection_std(const GPT2Config& config) {
  return config.initializer_range_ / std::sqrt(2.0 * static_cast<double>(config.n_layer_));
}

// Hugging Face's label for positions without a target (padding, the last position).
constexpr int64_t kIgnoredLabel = -100;

void check_config(const GPT2Config& c) {
  if (c.vocab_size_ < 1 || c.n_positions_ < 1 || c.n_embd_ < 1 || c.n_layer_ < 1 || c.n_head_ < 1) {
    fail("gpt2", "sizes must be positive: vocab_size ", c.vocab_size_, ", n_positions ", c.n_positions_, ", n_embd ", c.n_embd_,
         ", n_layer ", c.n_layer_, ", n_head ", c.n_head_);
  }
  if (c.n_embd_ % c.n_head_ != 0) fail("gpt2", "n_embd ", c.n_embd_, " must be divisible by n_head ", c.n_head_);
}

}  // namespace

Conv1D::Conv1D(int64_t in_features, int64_t out_features, double init_std) {
  weight = register_parameter("weight", empty({in_features, out_features}));
  nn::init::normal_(weight, 0.0, init_std);
  bias = register_parameter("bias", zeros({out_features}));
}

std::string Conv1D::extra_repr() const { return "nf=" + std::to_string(weight.size(1)) + ", nx=" + std::to_string(weight.size(0)); }

Tensor Conv1D::forward(const Tensor& input) {
  // One GEMM over all leading dims: a batched matmul against a 2-d weight would make the weight's
  // gradient a (B, in, out) tensor summed afterwards.
  Shape out_shape = input.shape();
  out_shape[out_shape.ndim() - 1] = weight.size(1);
  const Tensor rows = input.dim() == 2 ? input : input.reshape({-1, weight.size(0)});
  // Under autocast the product is bfloat16 and the bias joins it in that dtype, as in PyTorch's
  // addmm and nn.Linear: the float32 bias would otherwise promote every projection's output (and
  // GELU, the attention's inputs and their gradients) to float32.
  const Tensor product = matmul(rows, weight);
  const Tensor biased = add(product, bias.to(product.dtype()));
  // Rows in, rows out without a view: element-wise ops after it then meet the bias add in its own
  // shape, and a Graph's fusion pass joins them (GELU, residual adds of the cached step).
  return input.dim() == 2 ? biased : biased.reshape(out_shape);
}

GPT2Attention::GPT2Attention(const GPT2Config& config) : n_embd_(config.n_embd_), n_head_(config.n_head_) {
  check_config(config);
  c_attn = register_module("c_attn", std::make_shared<Conv1D>(n_embd_, 3 * n_embd_, config.initializer_range_));
  c_proj = register_module("c_proj", std::make_shared<Conv1D>(n_embd_, n_embd_, residual_projection_std(config)));
  attn_dropout = register_module("attn_dropout", std::make_shared<nn::Dropout>(config.attn_pdrop_));
  resid_dropout = register_module("resid_dropout", std::make_shared<nn::Dropout>(config.resid_pdrop_));
}

Tensor GPT2Attention::forward(const Tensor& hidden_states) {
  if (hidden_states.dim() != 3 || hidden_states.size(2) != n_embd_) {
    fail("gpt2", "attention expects hidden states of shape (B, T, ", n_embd_, "), got ", hidden_states.shape());
  }
  const int64_t batch = hidden_states.size(0), length = hidden_states.size(1), head_dim = n_embd_ / n_head_;
  // (B, T, 3 n_embd) -> query, key, value, each split into heads: (B, heads, T, head_dim).
  const TensorList qkv = split((*c_attn)(hidden_states), n_embd_, 2);
  auto heads = [&](const Tensor& x) { return x.reshape({batch, length, n_head_, head_dim}).permute({0, 2, 1, 3}); };
  const Tensor query = heads(qkv[0]), key = heads(qkv[1]), value = heads(qkv[2]);
  // Causal attention scaled by 1/sqrt(head_dim), attention dropout included: the fused kernel,
  // which keeps no (B, heads, T, T) matrix for backward.
  const double dropout_p = attn_dropout->is_training() ? attn_dropout->p() : 0.0;
  const Tensor attended = nn::functional::scaled_dot_product_attention(query, key, value, Tensor(), dropout_p, /*is_causal=*/true);
  // Heads side by side again, as HF merges them: (B, T, n_embd).
  const Tensor context = attended.permute({0, 2, 1, 3}).reshape({batch, length, n_embd_});
  return (*resid_dropout)((*c_proj)(context));
}

Tensor GPT2Attention::forward_cached(const Tensor& hidden_states, const CacheStep& step, Tensor& key_cache, Tensor& value_cache) {
  const int64_t batch = step.write_index.size(0), length = step.write_index.size(2), head_dim = n_embd_ / n_head_;
  if (hidden_states.dim() != 2 || hidden_states.size(0) != batch * length || hidden_states.size(1) != n_embd_) {
    fail("gpt2", "cached attention expects hidden states as rows (B * T, ", n_embd_, ") = (", batch * length, ", ", n_embd_, "), got ",
         hidden_states.shape());
  }
  const Shape cache_shape{batch, n_head_, key_cache.size(2), head_dim};
  if (!(key_cache.shape() == cache_shape) || !(value_cache.shape() == cache_shape)) {
    fail("gpt2", "the KV cache of a layer must be ", cache_shape, " (batch, n_head, max_length, head_dim), got keys ", key_cache.shape(),
         " and values ", value_cache.shape());
  }
  const TensorList qkv = split((*c_attn)(hidden_states), n_embd_, 1);
  auto heads = [&](const Tensor& x) { return x.reshape({batch, length, n_head_, head_dim}).permute({0, 2, 1, 3}); };
  const Tensor query = heads(qkv[0]), key = heads(qkv[1]), value = heads(qkv[2]);
  // Each new token's key and value go to its position along the cache's length dim.
  const Tensor index = step.write_index.expand({batch, n_head_, length, head_dim});
  if (step.update == CacheUpdate::kInPlace) {
    scatter_(key_cache, 2, index, key);
    scatter_(value_cache, 2, index, value);
  } else {
    key_cache = scatter(key_cache, 2, index, key);
    value_cache = scatter(value_cache, 2, index, value);
  }
  const bool whole = step.attend_length == key_cache.size(2);
  const Tensor keys = whole ? key_cache : key_cache.slice(2, 0, step.attend_length);
  const Tensor values = whole ? value_cache : value_cache.slice(2, 0, step.attend_length);
  const double dropout_p = attn_dropout->is_training() ? attn_dropout->p() : 0.0;
  // Under autocast the query may be narrower than the hidden states the mask was made beside.
  const Tensor mask = step.mask.dtype() == query.dtype() ? step.mask : flow::to(step.mask, query.dtype());
  const Tensor attended = nn::functional::scaled_dot_product_attention(query, keys, values, mask, dropout_p);
  const Tensor context = attended.permute({0, 2, 1, 3}).reshape({batch * length, n_embd_});
  return (*resid_dropout)((*c_proj)(context));
}

GPT2MLP::GPT2MLP(const GPT2Config& config) {
  check_config(config);
  const int64_t inner = 4 * config.n_embd_;
  c_fc = register_module("c_fc", std::make_shared<Conv1D>(config.n_embd_, inner, config.initializer_range_));
  c_proj = register_module("c_proj", std::make_shared<Conv1D>(inner, config.n_embd_, residual_projection_std(config)));
  act = register_module("act", std::make_shared<nn::GELU>("tanh"));
  dropout = register_module("dropout", std::make_shared<nn::Dropout>(config.resid_pdrop_));
}

Tensor GPT2MLP::forward(const Tensor& hidden_states) { return (*dropout)((*c_proj)((*act)((*c_fc)(hidden_states)))); }

GPT2Block::GPT2Block(const GPT2Config& config) {
  ln_1 = register_module("ln_1", layer_norm(config));
  attn = register_module("attn", std::make_shared<GPT2Attention>(config));
  ln_2 = register_module("ln_2", layer_norm(config));
  mlp = register_module("mlp", std::make_shared<GPT2MLP>(config));
}

Tensor GPT2Block::forward(const Tensor& hidden_states) {
  const Tensor attended = add(hidden_states, (*attn)((*ln_1)(hidden_states)));
  return add(attended, (*mlp)((*ln_2)(attended)));
}

Tensor GPT2Block::forward_cached(const Tensor& hidden_states, const CacheStep& step, Tensor& key_cache, Tensor& value_cache) {
  const Tensor attended = add(hidden_states, attn->forward_cached((*ln_1)(hidden_states), step, key_cache, value_cache));
  return add(attended, (*mlp)((*ln_2)(attended)));
}

GPT2Model::GPT2Model(const GPT2Config& config) : config_(config) {
  check_config(config);
  wte = register_module("wte", std::make_shared<nn::Embedding>(config.vocab_size_, config.n_embd_));
  wpe = register_module("wpe", std::make_shared<nn::Embedding>(config.n_positions_, config.n_embd_));
  // nn::Embedding starts N(0, 1); scaling gives N(0, initializer_range^2) without drawing GPT-2's
  // 38.6M wte values a second time.
  for (Tensor* weight : {&wte->weight, &wpe->weight}) {
    autograd::NoGradGuard no_grad;
    weight->copy_(mul(*weight, config.initializer_range_));
  }
  drop = register_module("drop", std::make_shared<nn::Dropout>(config.embd_pdrop_));
  h = register_module("h", std::make_shared<nn::ModuleList>());
  for (int64_t i = 0; i < config.n_layer_; ++i) {
    blocks.push_back(std::make_shared<GPT2Block>(config));
    h->push_back(blocks.back());
  }
  ln_f = register_module("ln_f", layer_norm(config));
}

Tensor GPT2Model::forward(const Tensor& input_ids) {
  if (input_ids.dim() != 2) fail("gpt2", "input_ids must be (batch, sequence), got shape ", input_ids.shape());
  const int64_t length = input_ids.size(1);
  if (length > config_.n_positions_) fail("gpt2", "sequence length ", length, " exceeds n_positions ", config_.n_positions_);
  // (T, C) position embeddings broadcast over the batch.
  const Tensor positions = arange(length, options_beside(input_ids).dtype(kInt64));
  Tensor hidden = (*drop)(add((*wte)(input_ids), (*wpe)(positions)));
  for (const auto& block : blocks) hidden = gradient_checkpointing_ && is_training() ? utils::checkpoint(*block, hidden) : (*block)(hidden);
  return (*ln_f)(hidden);
}

Tensor GPT2Model::forward_cached(const Tensor& input_ids, const Tensor& past_lengths, PastKeyValues& cache, int64_t attend_length,
                                 CacheUpdate update) {
  if (input_ids.dim() != 2 || input_ids.dtype() != kInt64) {
    fail("gpt2", "input_ids must be int64 (batch, sequence), got ", dtype_name(input_ids.dtype()), " ", input_ids.shape());
  }
  const int64_t batch = input_ids.size(0), length = input_ids.size(1);
  if (past_lengths.dim() != 1 || past_lengths.size(0) != batch || past_lengths.dtype() != kInt64) {
    fail("gpt2", "past_lengths must be int64 of shape (", batch, "), one per row of input_ids, got ", dtype_name(past_lengths.dtype()), " ",
         past_lengths.shape());
  }
  if (cache.num_layers() != config_.n_layer_ || static_cast<int64_t>(cache.values.size()) != config_.n_layer_) {
    fail("gpt2", "the KV cache must hold ", config_.n_layer_, " layers of keys and values, got ", cache.keys.size(), " and ",
         cache.values.size());
  }
  const int64_t max_length = cache.max_length();
  if (max_length > config_.n_positions_) fail("gpt2", "the KV cache's max_length ", max_length, " exceeds n_positions ", config_.n_positions_);
  if (length < 1 || length > max_length) fail("gpt2", "a cached step takes 1 to ", max_length, " tokens per row, got ", length);
  if (attend_length < 0 || attend_length > max_length) {
    fail("gpt2", "attend_length must be in [0, ", max_length, "] (0: the whole cache), got ", attend_length);
  }
  CacheStep step;
  step.attend_length = attend_length == 0 ? max_length : attend_length;
  step.update = update;
  const TensorOptions ints = options_beside(input_ids).dtype(kInt64);
  // (B, T): token t of row b sits at past_lengths[b] + t.
  const Tensor positions = add(past_lengths.unsqueeze(1), arange(length, ints).unsqueeze(0));
  const Tensor stored = clamp(positions, 0, max_length - 1);
  step.write_index = stored.reshape({batch, 1, length, 1});
  const Tensor visible = le(arange(step.attend_length, ints).reshape({1, 1, 1, step.attend_length}), positions.reshape({batch, 1, length, 1}));
  Tensor hidden = (*drop)(add((*wte)(input_ids), (*wpe)(stored)));
  step.mask = where(visible, zeros({}, options_beside(hidden)), -INFINITY);
  // The blocks work on rows (B * T, n_embd): see Conv1D::forward.
  Tensor rows = hidden.reshape({batch * length, config_.n_embd_});
  for (size_t i = 0; i < blocks.size(); ++i) rows = blocks[i]->forward_cached(rows, step, cache.keys[i], cache.values[i]);
  return (*ln_f)(rows).reshape({batch, length, config_.n_embd_});
}

GPT2LMHeadModel::GPT2LMHeadModel(const GPT2Config& config) {
  transformer = register_module("transformer", std::make_shared<GPT2Model>(config));
}

Tensor GPT2LMHeadModel::forward(const Tensor& input_ids) {
  const Tensor hidden = (*transformer)(input_ids);
  const Tensor& embedding = transformer->wte->weight;
  // One 2-d GEMM (see Conv1D::forward) against the tied embedding as a linear's weight, as
  // PyTorch's GPT-2 head does: autocast then casts wte itself (contiguous, and in a Graph written by
  // the optimizer's update-with-cast) rather than a transposed view, and wte's gradient comes out
  // in wte's own layout, so adding the embedding's gradient to it is a contiguous add.
  const Tensor logits = linear(hidden.reshape({-1, hidden.size(2)}), embedding);
  return logits.reshape({hidden.size(0), hidden.size(1), embedding.size(0)});
}

CausalLMOutputWithPast GPT2LMHeadModel::forward_cached(const Tensor& input_ids, const Tensor& past_lengths, PastKeyValues past_key_values,
                                                       const CachedForwardOptions& options) {
  Tensor hidden = transformer->forward_cached(input_ids, past_lengths, past_key_values, options.attend_length_, options.update_);
  const Tensor& lengths = options.input_lengths_;
  if (lengths.defined()) {
    const int64_t batch = hidden.size(0), length = hidden.size(1), width = hidden.size(2);
    if (lengths.dim() != 1 || lengths.size(0) != batch || lengths.dtype() != kInt64) {
      fail("gpt2", "input_lengths must be int64 of shape (", batch, "), got ", dtype_name(lengths.dtype()), " ", lengths.shape());
    }
    // Each row's last token (a row of no tokens reads its first position, a result nobody uses).
    // With one token per row (a decode step) that is the only one: nothing to pick.
    if (length > 1) {
      const Tensor last = clamp(sub(lengths, 1), 0, length - 1).reshape({batch, 1, 1}).expand({batch, 1, width});
      hidden = gather(hidden, 1, last);
    }
  }
  const Tensor& embedding = transformer->wte->weight;
  const Tensor logits = linear(hidden.reshape({-1, hidden.size(2)}), embedding);
  Shape shape = hidden.shape();
  shape[shape.ndim() - 1] = embedding.size(0);
  return {lengths.defined() ? logits : logits.reshape(shape), std::move(past_key_values)};
}

std::shared_ptr<KVCache> GPT2LMHeadModel::make_cache(int64_t batch_size, int64_t max_length) const {
  const GPT2Config& c = transformer->config();
  if (max_length > c.n_positions_) fail("gpt2", "a KV cache of max_length ", max_length, " exceeds n_positions ", c.n_positions_);
  return std::make_shared<KVCache>(c.n_layer_, batch_size, c.n_head_, max_length, c.n_embd_ / c.n_head_,
                                   options_beside(transformer->wte->weight));
}

Tensor GPT2LMHeadModel::loss(const Tensor& input_ids, const Tensor& labels) { return causal_lm_loss(forward(input_ids), labels); }

Tensor causal_lm_loss(const Tensor& logits, const Tensor& labels) {
  if (logits.dim() != 3 || labels.dim() != 2 || logits.size(0) != labels.size(0) || logits.size(1) != labels.size(1)) {
    fail("gpt2", "causal_lm_loss expects logits (B, T, V) and labels (B, T), got ", logits.shape(), " and ", labels.shape());
  }
  const int64_t length = logits.size(1);
  if (length < 2) fail("gpt2", "causal_lm_loss needs sequences of at least 2 tokens, got ", length);
  // The labels move one step left and the last position gets the ignored label, rather than
  // dropping the logits' last position: flattening a slice of the logits would copy the step's
  // largest tensor, (B, T - 1, vocab).
  const Tensor ignored = full({labels.size(0), 1}, kIgnoredLabel, options_beside(labels));
  const Tensor next_tokens = cat({labels.slice(1, 1, length), ignored}, 1);
  return nn::functional::cross_entropy(logits.reshape({-1, logits.size(2)}), next_tokens.reshape({-1}),
                                       nn::functional::CrossEntropyLossOptions().ignore_index(kIgnoredLabel));
}

}  // namespace flow::models
