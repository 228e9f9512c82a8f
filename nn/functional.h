#pragma once
// nn::functional: the stateless forms of the layers and losses (torch.nn.functional).
#include <optional>
#include <string>

#include "core/ops/all.h"

namespace flow::nn::functional {

using flow::avg_pool2d;
using flow::conv2d;
using flow::conv_transpose2d;
using flow::gelu;
using flow::linear;
using flow::log_softmax;
using flow::max_pool2d;
using flow::relu;
using flow::sigmoid;
using flow::silu;
using flow::softmax;
using flow::softplus;
using flow::tanh;

Tensor relu6(const Tensor& input);
Tensor leaky_relu(const Tensor& input, double negative_slope = 0.01);
// Zeroes elements with probability p and scales the rest by 1/(1-p) when training.
Tensor dropout(const Tensor& input, double p = 0.5, bool training = true);
// (x - mean) / sqrt(var + eps) over the last normalized_shape.size() dims, then weight/bias.
Tensor layer_norm(const Tensor& input, const std::vector<int64_t>& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// Normalises over (N, *) per channel with batch statistics (training) or the given running ones.
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), bool training = false, double momentum = 0.1, double eps = 1e-5);
Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  double eps = 1e-5);
// x / sqrt(mean(x^2) + eps) * weight over the last normalized_shape.size() dims, as PyTorch's
// composite: eps defaults to the machine epsilon of the computation type (float for float16 and
// bfloat16 inputs, as PyTorch's opmath type), and the gradient comes from the primitives'.
Tensor rms_norm(const Tensor& input, const std::vector<int64_t>& normalized_shape, const Tensor& weight = Tensor(),
                std::optional<double> eps = std::nullopt);
// Rows of weight at indices. The row at padding_idx (negative counts from the end) receives no
// gradient: its positions in the output pass none back.
Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx = std::nullopt);
// PyTorch's F.pad: pad holds (before, after) pairs for the last dims, the last dim first;
// negative entries crop. Modes: "constant" (filled with value; any number of pairs), and
// "reflect" (mirrored about the edge element, each pad < the dim's size), "replicate" (the edge
// element repeated) and "circular" (wrapped around, each pad <= the dim's size), which pad 1, 2 or
// 3 trailing dims of an input with one or two more dims (e.g. 2 pairs: (C, H, W) or (N, C, H, W))
// and take no value.
Tensor pad(const Tensor& input, const std::vector<int64_t>& pad, const std::string& mode = "constant", double value = 0.0);

// PyTorch's scaled_dot_product_attention: softmax(query @ key^T * scale + mask) @ value, with
// dropout on the attention weights. query (..., L, E), key (..., S, E), value (..., S, Ev);
// attn_mask broadcasts to (..., L, S), bool (true takes part) or added to the scores; is_causal
// (not with attn_mask) lets query i see keys j <= i; scale defaults to 1/sqrt(E). A row that sees
// no key gives zeros. Runs the fused kernel (flow::flash_attention: no (L, S) matrix is kept for
// backward), dropout included; the scores become a matrix only for dropout_p == 1 and for global
// inputs with dropout. Like PyTorch's, dropout applies whenever dropout_p > 0: pass 0 when
// evaluating.
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_mask = Tensor(),
                                    double dropout_p = 0.0, bool is_causal = false, std::optional<double> scale = std::nullopt);
// Softmax over dim, except that a row whose entries are all -inf (attention scores of a query that
// sees no key) gives zeros rather than NaN, as PyTorch's _safe_softmax and the fused kernel do.
Tensor safe_softmax(const Tensor& input, int64_t dim);

enum class Reduction { kNone, kMean, kSum };
Reduction reduction_from_string(const std::string& reduction);

struct NLLLossOptions {
  int64_t ignore_index_ = -100;
  Reduction reduction_ = Reduction::kMean;
  NLLLossOptions& ignore_index(int64_t v) { ignore_index_ = v; return *this; }
  NLLLossOptions& reduction(Reduction v) { reduction_ = v; return *this; }
};
struct CrossEntropyLossOptions {
  int64_t ignore_index_ = -100;
  Reduction reduction_ = Reduction::kMean;
  double label_smoothing_ = 0.0;
  CrossEntropyLossOptions& ignore_index(int64_t v) { ignore_index_ = v; return *this; }
  CrossEntropyLossOptions& reduction(Reduction v) { reduction_ = v; return *this; }
  CrossEntropyLossOptions& label_smoothing(double v) { label_smoothing_ = v; return *this; }
};

// input: log-probabilities (N, C) or (N, C, d1, ...); target: int64 class indices (N) or (N, d1, ...).
Tensor nll_loss(const Tensor& input, const Tensor& target, const NLLLossOptions& options = {});
// input: logits of the same layouts; log_softmax over dim 1, then nll_loss (with label smoothing).
// Logits (N, C) or (C) off CUDA without label smoothing take the fused
// sparse_softmax_cross_entropy op (the same losses, no log-probabilities kept for backward).
Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyLossOptions& options = {});
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean);
// 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta.
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean, double beta = 1.0);
// input: probabilities in [0, 1]; logs are clamped at -100 like PyTorch.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean);
// input: logits; the stable form max(x, 0) - x t + log(1 + exp(-|x|)).
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean);
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean);

}  // namespace flow::nn::functional
