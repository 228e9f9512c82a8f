#pragma once
// Attention layers with PyTorch's names, options, parameter names (state dicts load both ways)
// and initialisation: MultiheadAttention, TransformerEncoderLayer/DecoderLayer, their stacks and
// Transformer. Masks and the other inputs go through forward overloads with PyTorch's argument
// order, as libtorch's modules take them; forward(x) alone is self-attention without masks.
#include <memory>
#include <string>
#include <utility>

#include "nn/conv_norm.h"
#include "nn/modules.h"

namespace flow::nn {

struct MultiheadAttentionOptions {
  MultiheadAttentionOptions(int64_t embed_dim, int64_t num_heads) : embed_dim_(embed_dim), num_heads_(num_heads) {}
  MultiheadAttentionOptions& dropout(double v) { dropout_ = v; return *this; }
  MultiheadAttentionOptions& bias(bool v) { bias_ = v; return *this; }
  MultiheadAttentionOptions& kdim(int64_t v) { kdim_ = v; return *this; }
  MultiheadAttentionOptions& vdim(int64_t v) { vdim_ = v; return *this; }
  MultiheadAttentionOptions& batch_first(bool v) { batch_first_ = v; return *this; }
  int64_t embed_dim_, num_heads_;
  double dropout_ = 0.0;
  bool bias_ = true;
  int64_t kdim_ = 0, vdim_ = 0;  // 0: embed_dim
  bool batch_first_ = false;
};

// Multi-head attention as torch.nn.MultiheadAttention. Inputs are (L, N, E) ((N, L, E) with
// batch_first) or unbatched (L, E). Masks, PyTorch's conventions: attn_mask (L, S) or
// (N * num_heads, L, S) and key_padding_mask (N, S) are bool (true: may NOT attend) or float
// (added to the scores). Without need_weights the heads run through the fused attention kernel
// (nn::functional::scaled_dot_product_attention); with it, the weights are computed as a matrix
// and returned averaged over heads (or per head). A query that may attend to no key gives zeros.
class MultiheadAttention : public Module {
 public:
  explicit MultiheadAttention(const MultiheadAttentionOptions& options);
  MultiheadAttention(int64_t embed_dim, int64_t num_heads) : MultiheadAttention(MultiheadAttentionOptions(embed_dim, num_heads)) {}
  std::string name() const override { return "MultiheadAttention"; }
  std::string extra_repr() const override;
  // Self-attention of input, no mask, no weights.
  Tensor forward(const Tensor& input) override;
  // {attn_output, attn_output_weights (undefined without need_weights)}. is_causal, as in
  // PyTorch, is a hint that attn_mask is the causal mask, which it then need not read.
  std::pair<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& key_padding_mask = {},
                                    bool need_weights = true, const Tensor& attn_mask = {}, bool average_attn_weights = true,
                                    bool is_causal = false);
  void reset_parameters();
  const MultiheadAttentionOptions& options() const { return options_; }

  // in_proj_weight (3E, E) when kdim == vdim == embed_dim, else q/k/v_proj_weight.
  Tensor in_proj_weight, q_proj_weight, k_proj_weight, v_proj_weight, in_proj_bias;
  std::shared_ptr<Linear> out_proj;

 private:
  MultiheadAttentionOptions options_;
};

struct TransformerLayerOptions {
  TransformerLayerOptions(int64_t d_model, int64_t nhead) : d_model_(d_model), nhead_(nhead) {}
  TransformerLayerOptions& dim_feedforward(int64_t v) { dim_feedforward_ = v; return *this; }
  TransformerLayerOptions& dropout(double v) { dropout_ = v; return *this; }
  // "relu" or "gelu".
  TransformerLayerOptions& activation(std::string v) { activation_ = std::move(v); return *this; }
  TransformerLayerOptions& layer_norm_eps(double v) { layer_norm_eps_ = v; return *this; }
  TransformerLayerOptions& batch_first(bool v) { batch_first_ = v; return *this; }
  TransformerLayerOptions& norm_first(bool v) { norm_first_ = v; return *this; }
  TransformerLayerOptions& bias(bool v) { bias_ = v; return *this; }
  int64_t d_model_, nhead_;
  int64_t dim_feedforward_ = 2048;
  double dropout_ = 0.1;
  std::string activation_ = "relu";
  double layer_norm_eps_ = 1e-5;
  bool batch_first_ = false, norm_first_ = false, bias_ = true;
};
using TransformerEncoderLayerOptions = TransformerLayerOptions;
using TransformerDecoderLayerOptions = TransformerLayerOptions;

// Self-attention and a feed-forward block, each residual, with layer norm after (or, with
// norm_first, before) each: torch.nn.TransformerEncoderLayer.
class TransformerEncoderLayer : public Module {
 public:
  explicit TransformerEncoderLayer(const TransformerEncoderLayerOptions& options);
  std::string name() const override { return "TransformerEncoderLayer"; }
  Tensor forward(const Tensor& src) override { return forward(src, Tensor()); }
  Tensor forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask = {}, bool is_causal = false);
  const TransformerEncoderLayerOptions& options() const { return options_; }

  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2;
  std::shared_ptr<LayerNorm> norm1, norm2;

 private:
  TransformerEncoderLayerOptions options_;
};

// Self-attention, attention over the encoder's output (memory) and a feed-forward block:
// torch.nn.TransformerDecoderLayer.
class TransformerDecoderLayer : public Module {
 public:
  explicit TransformerDecoderLayer(const TransformerDecoderLayerOptions& options);
  std::string name() const override { return "TransformerDecoderLayer"; }
  using Module::forward;
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {}, const Tensor& memory_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {}, bool tgt_is_causal = false,
                 bool memory_is_causal = false);
  const TransformerDecoderLayerOptions& options() const { return options_; }

  std::shared_ptr<MultiheadAttention> self_attn, multihead_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2, dropout3;
  std::shared_ptr<LayerNorm> norm1, norm2, norm3;

 private:
  TransformerDecoderLayerOptions options_;
};

// num_layers copies of one layer (the same initial weights, as PyTorch's deep copies) under
// "layers", then an optional final norm: torch.nn.TransformerEncoder / TransformerDecoder.
class TransformerEncoder : public Module {
 public:
  TransformerEncoder(const std::shared_ptr<TransformerEncoderLayer>& encoder_layer, int64_t num_layers,
                     std::shared_ptr<LayerNorm> norm = nullptr);
  std::string name() const override { return "TransformerEncoder"; }
  Tensor forward(const Tensor& src) override { return forward(src, Tensor()); }
  Tensor forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask = {}, bool is_causal = false);

  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<LayerNorm> norm;
};

class TransformerDecoder : public Module {
 public:
  TransformerDecoder(const std::shared_ptr<TransformerDecoderLayer>& decoder_layer, int64_t num_layers,
                     std::shared_ptr<LayerNorm> norm = nullptr);
  std::string name() const override { return "TransformerDecoder"; }
  using Module::forward;
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {}, const Tensor& memory_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {}, bool tgt_is_causal = false,
                 bool memory_is_causal = false);

  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<LayerNorm> norm;
};

struct TransformerOptions {
  TransformerOptions() = default;
  TransformerOptions& d_model(int64_t v) { layer_.d_model_ = v; return *this; }
  TransformerOptions& nhead(int64_t v) { layer_.nhead_ = v; return *this; }
  TransformerOptions& num_encoder_layers(int64_t v) { num_encoder_layers_ = v; return *this; }
  TransformerOptions& num_decoder_layers(int64_t v) { num_decoder_layers_ = v; return *this; }
  TransformerOptions& dim_feedforward(int64_t v) { layer_.dim_feedforward(v); return *this; }
  TransformerOptions& dropout(double v) { layer_.dropout(v); return *this; }
  TransformerOptions& activation(std::string v) { layer_.activation(std::move(v)); return *this; }
  TransformerOptions& layer_norm_eps(double v) { layer_.layer_norm_eps(v); return *this; }
  TransformerOptions& batch_first(bool v) { layer_.batch_first(v); return *this; }
  TransformerOptions& norm_first(bool v) { layer_.norm_first(v); return *this; }
  TransformerOptions& bias(bool v) { layer_.bias(v); return *this; }
  TransformerLayerOptions layer_{512, 8};
  int64_t num_encoder_layers_ = 6, num_decoder_layers_ = 6;
};

// Encoder and decoder stacks with final norms, every matrix xavier-uniform initialised:
// torch.nn.Transformer.
class Transformer : public Module {
 public:
  explicit Transformer(const TransformerOptions& options = {});
  std::string name() const override { return "Transformer"; }
  using Module::forward;
  Tensor forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask = {}, const Tensor& tgt_mask = {},
                 const Tensor& memory_mask = {}, const Tensor& src_key_padding_mask = {}, const Tensor& tgt_key_padding_mask = {},
                 const Tensor& memory_key_padding_mask = {});
  // The (sz, sz) float mask with -inf above the diagonal: position i attends to j <= i.
  static Tensor generate_square_subsequent_mask(int64_t sz);

  std::shared_ptr<TransformerEncoder> encoder;
  std::shared_ptr<TransformerDecoder> decoder;
};

}  // namespace flow::nn
