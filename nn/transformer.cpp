#include "nn/transformer.h"

#include <cmath>
#include <limits>

#include "core/grad_mode.h"
#include "nn/init.h"

namespace flow::nn {
namespace {

constexpr const char* kAttentionOp = "MultiheadAttention";

// A PyTorch-convention mask (bool: true may NOT attend; float: added) as an additive float mask of
// dtype, or undefined.
Tensor additive_mask(const Tensor& mask, DType dtype) {
  if (!mask.defined()) return mask;
  if (mask.dtype() == kBool) return masked_fill(zeros(mask.shape(), TensorOptions(dtype).device(mask.device())), mask, -INFINITY);
  return mask.to(dtype);
}

Tensor activation(const std::string& name, const Tensor& x) { return name == "gelu" ? gelu(x) : relu(x); }

void check_layer_options(const TransformerLayerOptions& options, const char* op) {
  FLOW_ARG_CHECK(options.activation_ == "relu" || options.activation_ == "gelu", op, "activation should be relu/gelu, not ",
                 options.activation_);
  FLOW_ARG_CHECK(options.dim_feedforward_ > 0, op, "dim_feedforward must be positive, got ", options.dim_feedforward_);
}

// Copies of `layer` with its weights, as PyTorch's _get_clones deep-copies it.
template <typename Layer>
std::shared_ptr<ModuleList> clones(const std::shared_ptr<Layer>& layer, int64_t count, const char* op) {
  FLOW_ARG_CHECK(layer != nullptr, op, "the layer is null");
  FLOW_ARG_CHECK(count >= 1, op, "num_layers must be at least 1, got ", count);
  auto list = std::make_shared<ModuleList>();
  const StateDict weights = layer->state_dict();
  for (int64_t i = 0; i < count; ++i) {
    auto copy = std::make_shared<Layer>(layer->options());
    copy->load_state_dict(weights);
    list->push_back(copy);
  }
  return list;
}

}  // namespace

MultiheadAttention::MultiheadAttention(const MultiheadAttentionOptions& options) : options_(options) {
  const int64_t e = options.embed_dim_;
  FLOW_ARG_CHECK(e > 0 && options.num_heads_ > 0, kAttentionOp, "embed_dim and num_heads must be positive, got ", e, " and ",
                 options.num_heads_);
  FLOW_ARG_CHECK(e % options.num_heads_ == 0, kAttentionOp, "embed_dim must be divisible by num_heads, got ", e, " and ",
                 options.num_heads_);
  FLOW_ARG_CHECK(options.dropout_ >= 0 && options.dropout_ <= 1, kAttentionOp, "dropout must be in [0, 1], got ", options.dropout_);
  options_.kdim_ = options.kdim_ > 0 ? options.kdim_ : e;
  options_.vdim_ = options.vdim_ > 0 ? options.vdim_ : e;
  if (options_.kdim_ == e && options_.vdim_ == e) {
    in_proj_weight = register_parameter("in_proj_weight", empty({3 * e, e}));
  } else {
    q_proj_weight = register_parameter("q_proj_weight", empty({e, e}));
    k_proj_weight = register_parameter("k_proj_weight", empty({e, options_.kdim_}));
    v_proj_weight = register_parameter("v_proj_weight", empty({e, options_.vdim_}));
  }
  if (options.bias_) in_proj_bias = register_parameter("in_proj_bias", empty({3 * e}));
  out_proj = register_module("out_proj", std::make_shared<Linear>(e, e, options.bias_));
  reset_parameters();
}

void MultiheadAttention::reset_parameters() {
  // PyTorch's _reset_parameters: xavier-uniform projections, zero biases; out_proj.weight keeps
  // Linear's initialisation.
  autograd::NoGradGuard no_grad;
  for (Tensor* weight : {&in_proj_weight, &q_proj_weight, &k_proj_weight, &v_proj_weight}) {
    if (weight->defined()) init::xavier_uniform_(*weight);
  }
  if (in_proj_bias.defined()) init::zeros_(in_proj_bias);
  if (out_proj->bias.defined()) init::zeros_(out_proj->bias);
}

std::string MultiheadAttention::extra_repr() const { return "embed_dim=" + std::to_string(options_.embed_dim_) + ", num_heads=" + std::to_string(options_.num_heads_); }

Tensor MultiheadAttention::forward(const Tensor& input) { return forward(input, input, input, Tensor(), false).first; }

std::pair<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                      const Tensor& key_padding_mask, bool need_weights, const Tensor& attn_mask,
                                                      bool average_attn_weights, bool is_causal) {
  const int64_t e = options_.embed_dim_, heads = options_.num_heads_, head_dim = e / heads;
  FLOW_ARG_CHECK(query.defined() && key.defined() && value.defined(), kAttentionOp, "query, key and value must be defined");
  const bool batched = query.dim() == 3;
  FLOW_ARG_CHECK(query.dim() == 3 || query.dim() == 2, kAttentionOp, "query should be unbatched 2-D or batched 3-D, got ",
                 query.dim(), "-D");
  FLOW_ARG_CHECK(key.dim() == query.dim() && value.dim() == query.dim(), kAttentionOp, "key and value must have query's rank ",
                 query.dim(), ", got ", key.dim(), " and ", value.dim());
  FLOW_ARG_CHECK(query.size(-1) == e, kAttentionOp, "was expecting embedding dimension of ", e, ", but got ", query.size(-1));
  FLOW_ARG_CHECK(key.size(-1) == options_.kdim_ && value.size(-1) == options_.vdim_, kAttentionOp, "key and value need ",
                 options_.kdim_, " and ", options_.vdim_, " features, got ", key.size(-1), " and ", value.size(-1));
  FLOW_ARG_CHECK(!is_causal || attn_mask.defined(), kAttentionOp, "Need attn_mask if specifying the is_causal hint");
  // To (N, L, E): batch first, a batch of one for unbatched inputs.
  auto batch_first = [&](const Tensor& x) { return !batched ? x.unsqueeze(0) : options_.batch_first_ ? x : x.transpose(0, 1); };
  const Tensor q_in = batch_first(query), k_in = batch_first(key), v_in = batch_first(value);
  const int64_t n = q_in.size(0), l = q_in.size(1), s = k_in.size(1);
  FLOW_ARG_CHECK(k_in.size(0) == n && v_in.size(0) == n && v_in.size(1) == s, kAttentionOp, "key and value must match query's batch (",
                 n, ") and each other's length, got ", key.shape(), " and ", value.shape());

  auto bias_part = [&](int64_t part) { return in_proj_bias.defined() ? in_proj_bias.narrow(0, part * e, e) : Tensor(); };
  auto weight_part = [&](int64_t part, const Tensor& separate) { return in_proj_weight.defined() ? in_proj_weight.narrow(0, part * e, e) : separate; };
  // (N, L, E) -> (N, heads, L, head_dim)
  auto split_heads = [&](const Tensor& x) { return x.reshape({n, x.size(1), heads, head_dim}).transpose(1, 2); };
  const Tensor q = split_heads(linear(q_in, weight_part(0, q_proj_weight), bias_part(0)));
  const Tensor k = split_heads(linear(k_in, weight_part(1, k_proj_weight), bias_part(1)));
  const Tensor v = split_heads(linear(v_in, weight_part(2, v_proj_weight), bias_part(2)));

  // One additive mask broadcasting to (N, heads, L, S).
  Tensor mask;
  if (attn_mask.defined() && !(is_causal && !need_weights && !key_padding_mask.defined())) {
    const bool per_head = attn_mask.dim() == 3;
    FLOW_ARG_CHECK((attn_mask.dim() == 2 && attn_mask.size(0) == l && attn_mask.size(1) == s) ||
                       (per_head && attn_mask.size(0) == n * heads && attn_mask.size(1) == l && attn_mask.size(2) == s),
                   kAttentionOp, "attn_mask should be (", l, ", ", s, ") or (", n * heads, ", ", l, ", ", s, "), got ", attn_mask.shape());
    mask = additive_mask(per_head ? attn_mask.reshape({n, heads, l, s}) : attn_mask, q.dtype());
  }
  if (key_padding_mask.defined()) {
    FLOW_ARG_CHECK(key_padding_mask.shape() == (batched ? Shape{n, s} : Shape{s}), kAttentionOp, "key_padding_mask should be (",
                   batched ? std::to_string(n) + ", " : "", s, "), got ", key_padding_mask.shape());
    const Tensor padding = additive_mask(key_padding_mask, q.dtype()).reshape({n, 1, 1, s});
    mask = mask.defined() ? mask + padding : padding;
  }
  const double dropout_p = is_training() ? options_.dropout_ : 0.0;
  const bool causal_only = is_causal && !mask.defined();

  Tensor attended, weights;
  if (need_weights) {
    Tensor scores = matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(head_dim)));
    if (mask.defined()) scores = scores + mask;
    weights = functional::dropout(functional::safe_softmax(scores, -1), dropout_p, true);
    attended = matmul(weights, v);
    weights = average_attn_weights ? mean(weights, {1}) : weights;
    if (!batched) weights = weights.squeeze(0);
  } else {
    attended = functional::scaled_dot_product_attention(q, k, v, mask, dropout_p, causal_only);
  }
  // (N, heads, L, head_dim) -> (N, L, E), projected, back to the caller's layout.
  Tensor out = (*out_proj)(attended.transpose(1, 2).reshape({n, l, e}));
  out = !batched ? out.squeeze(0) : options_.batch_first_ ? out : out.transpose(0, 1);
  return {out, weights};
}

TransformerEncoderLayer::TransformerEncoderLayer(const TransformerEncoderLayerOptions& options) : options_(options) {
  check_layer_options(options, "TransformerEncoderLayer");
  const int64_t d = options.d_model_;
  self_attn = register_module("self_attn", std::make_shared<MultiheadAttention>(MultiheadAttentionOptions(d, options.nhead_)
                                                                                    .dropout(options.dropout_)
                                                                                    .bias(options.bias_)
                                                                                    .batch_first(options.batch_first_)));
  linear1 = register_module("linear1", std::make_shared<Linear>(d, options.dim_feedforward_, options.bias_));
  dropout = register_module("dropout", std::make_shared<Dropout>(options.dropout_));
  linear2 = register_module("linear2", std::make_shared<Linear>(options.dim_feedforward_, d, options.bias_));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(std::vector<int64_t>{d}, options.layer_norm_eps_));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(std::vector<int64_t>{d}, options.layer_norm_eps_));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(options.dropout_));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(options.dropout_));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask, bool is_causal) {
  auto self_attention = [&](const Tensor& x) {
    return (*dropout1)(self_attn->forward(x, x, x, src_key_padding_mask, false, src_mask, true, is_causal).first);
  };
  auto feed_forward = [&](const Tensor& x) {
    return (*dropout2)((*linear2)((*dropout)(activation(options_.activation_, (*linear1)(x)))));
  };
  Tensor x = src;
  if (options_.norm_first_) {
    x = x + self_attention((*norm1)(x));
    return x + feed_forward((*norm2)(x));
  }
  x = (*norm1)(x + self_attention(x));
  return (*norm2)(x + feed_forward(x));
}

TransformerDecoderLayer::TransformerDecoderLayer(const TransformerDecoderLayerOptions& options) : options_(options) {
  check_layer_options(options, "TransformerDecoderLayer");
  const int64_t d = options.d_model_;
  const auto attention = MultiheadAttentionOptions(d, options.nhead_).dropout(options.dropout_).bias(options.bias_).batch_first(options.batch_first_);
  self_attn = register_module("self_attn", std::make_shared<MultiheadAttention>(attention));
  multihead_attn = register_module("multihead_attn", std::make_shared<MultiheadAttention>(attention));
  linear1 = register_module("linear1", std::make_shared<Linear>(d, options.dim_feedforward_, options.bias_));
  dropout = register_module("dropout", std::make_shared<Dropout>(options.dropout_));
  linear2 = register_module("linear2", std::make_shared<Linear>(options.dim_feedforward_, d, options.bias_));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(std::vector<int64_t>{d}, options.layer_norm_eps_));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(std::vector<int64_t>{d}, options.layer_norm_eps_));
  norm3 = register_module("norm3", std::make_shared<LayerNorm>(std::vector<int64_t>{d}, options.layer_norm_eps_));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(options.dropout_));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(options.dropout_));
  dropout3 = register_module("dropout3", std::make_shared<Dropout>(options.dropout_));
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask, const Tensor& memory_mask,
                                        const Tensor& tgt_key_padding_mask, const Tensor& memory_key_padding_mask, bool tgt_is_causal,
                                        bool memory_is_causal) {
  auto self_attention = [&](const Tensor& x) {
    return (*dropout1)(self_attn->forward(x, x, x, tgt_key_padding_mask, false, tgt_mask, true, tgt_is_causal).first);
  };
  auto cross_attention = [&](const Tensor& x) {
    return (*dropout2)(multihead_attn->forward(x, memory, memory, memory_key_padding_mask, false, memory_mask, true, memory_is_causal).first);
  };
  auto feed_forward = [&](const Tensor& x) {
    return (*dropout3)((*linear2)((*dropout)(activation(options_.activation_, (*linear1)(x)))));
  };
  Tensor x = tgt;
  if (options_.norm_first_) {
    x = x + self_attention((*norm1)(x));
    x = x + cross_attention((*norm2)(x));
    return x + feed_forward((*norm3)(x));
  }
  x = (*norm1)(x + self_attention(x));
  x = (*norm2)(x + cross_attention(x));
  return (*norm3)(x + feed_forward(x));
}

TransformerEncoder::TransformerEncoder(const std::shared_ptr<TransformerEncoderLayer>& encoder_layer, int64_t num_layers,
                                       std::shared_ptr<LayerNorm> final_norm) {
  layers = register_module("layers", clones(encoder_layer, num_layers, "TransformerEncoder"));
  if (final_norm) norm = register_module("norm", std::move(final_norm));
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask, bool is_causal) {
  Tensor x = src;
  for (size_t i = 0; i < layers->size(); ++i) {
    x = std::static_pointer_cast<TransformerEncoderLayer>((*layers)[i])->forward(x, mask, src_key_padding_mask, is_causal);
  }
  return norm ? (*norm)(x) : x;
}

TransformerDecoder::TransformerDecoder(const std::shared_ptr<TransformerDecoderLayer>& decoder_layer, int64_t num_layers,
                                       std::shared_ptr<LayerNorm> final_norm) {
  layers = register_module("layers", clones(decoder_layer, num_layers, "TransformerDecoder"));
  if (final_norm) norm = register_module("norm", std::move(final_norm));
}

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask, const Tensor& memory_mask,
                                   const Tensor& tgt_key_padding_mask, const Tensor& memory_key_padding_mask, bool tgt_is_causal,
                                   bool memory_is_causal) {
  Tensor x = tgt;
  for (size_t i = 0; i < layers->size(); ++i) {
    x = std::static_pointer_cast<TransformerDecoderLayer>((*layers)[i])
            ->forward(x, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal, memory_is_causal);
  }
  return norm ? (*norm)(x) : x;
}

Transformer::Transformer(const TransformerOptions& options) {
  const TransformerLayerOptions& layer = options.layer_;
  auto final_norm = [&] { return std::make_shared<LayerNorm>(std::vector<int64_t>{layer.d_model_}, layer.layer_norm_eps_); };
  encoder = register_module("encoder", std::make_shared<TransformerEncoder>(std::make_shared<TransformerEncoderLayer>(layer),
                                                                            options.num_encoder_layers_, final_norm()));
  decoder = register_module("decoder", std::make_shared<TransformerDecoder>(std::make_shared<TransformerDecoderLayer>(layer),
                                                                            options.num_decoder_layers_, final_norm()));
  autograd::NoGradGuard no_grad;
  for (Tensor& parameter : parameters()) {
    if (parameter.dim() > 1) init::xavier_uniform_(parameter);
  }
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask, const Tensor& tgt_mask,
                            const Tensor& memory_mask, const Tensor& src_key_padding_mask, const Tensor& tgt_key_padding_mask,
                            const Tensor& memory_key_padding_mask) {
  const Tensor memory = encoder->forward(src, src_mask, src_key_padding_mask);
  return decoder->forward(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask);
}

Tensor Transformer::generate_square_subsequent_mask(int64_t sz) {
  FLOW_ARG_CHECK(sz >= 0, "generate_square_subsequent_mask", "sz must be non-negative, got ", sz);
  const Tensor future = gt(arange(sz).unsqueeze(0), arange(sz).unsqueeze(1));
  return masked_fill(zeros({sz, sz}), future, -INFINITY);
}

}  // namespace flow::nn
