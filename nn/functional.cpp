#include "nn/functional.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/grad_mode.h"

namespace flow::nn::functional {
namespace {

Tensor reduce(const Tensor& loss, Reduction reduction) {
  switch (reduction) {
    case Reduction::kNone: return loss;
    case Reduction::kSum: return sum(loss);
    case Reduction::kMean: return mean(loss);
  }
  return loss;
}

// (N, C, d1, ...) -> (N*d1*..., C) and the matching flattened target.
std::pair<Tensor, Tensor> flatten_classes(const Tensor& input, const Tensor& target, const char* op) {
  if (input.dim() < 1) fail(op, "input must have at least one dimension, got a 0-d tensor");
  if (target.dtype() != kInt64) fail(op, "expected int64 class-index targets, got ", dtype_name(target.dtype()));
  if (input.dim() == 1) {
    if (target.dim() != 0) fail(op, "for unbatched input ", input.shape(), " the target must be 0-d, got ", target.shape());
    return {input.unsqueeze(0), target.reshape({1})};
  }
  Shape expected_target{input.size(0)};
  for (int64_t d = 2; d < input.dim(); ++d) expected_target.push_back(input.size(d));
  if (!(target.shape() == expected_target)) {
    fail(op, "expected target of shape ", expected_target, " for input ", input.shape(), ", got ", target.shape());
  }
  if (input.dim() == 2) return {input, target};
  std::vector<int64_t> order{0};
  for (int64_t d = 2; d < input.dim(); ++d) order.push_back(d);
  order.push_back(1);
  return {input.permute(order).reshape({-1, input.size(1)}), target.reshape({-1})};
}

Tensor validity(const Tensor& target, int64_t ignore_index) { return ne(target, ignore_index); }

// Per-element losses of class-index targets (flattened, 0 where ignored) reduced as PyTorch does:
// 'mean' over the elements whose target is not ignored (valid), 'none' in the target's shape.
Tensor reduce_class_losses(const Tensor& losses, const Tensor& valid, const Tensor& target, Reduction reduction) {
  if (reduction == Reduction::kMean) return sum(losses) / sum(to(valid, losses.dtype()));
  return reduce(target.dim() == 0 ? losses.reshape({}) : losses.reshape(target.shape()), reduction);
}

// (x - mean) / sqrt(var + eps) over `dims`, the statistics computed on x.
Tensor normalize(const Tensor& x, const std::vector<int64_t>& dims, double eps) {
  const Tensor mu = mean(x, dims, true);
  const Tensor centered = x - mu;
  return centered * rsqrt(mean(centered * centered, dims, true) + eps);
}

// Shape (1, C, 1, ...) for broadcasting per-channel values over an input of `rank` dims.
Shape channel_shape(int64_t channels, int64_t rank) {
  Shape shape(std::vector<int64_t>(static_cast<size_t>(rank), 1));
  shape[1] = channels;
  return shape;
}

Tensor affine(const Tensor& y, const Tensor& weight, const Tensor& bias, const Shape& shape) {
  Tensor out = weight.defined() ? y * weight.reshape(shape) : y;
  return bias.defined() ? out + bias.reshape(shape) : out;
}

}  // namespace

Tensor layer_norm(const Tensor& input, const std::vector<int64_t>& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  return flow::layer_norm(input, normalized_shape, weight, bias, eps);
}

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  if (input.dim() < 2) fail("batch_norm", "expected input with a channel dim (N,C,...), got ", input.shape());
  if (!training) return batch_norm_eval(input, running_mean, running_var, weight, bias, eps);
  const int64_t channels = input.size(1);
  for (const Tensor* stat : {&running_mean, &running_var}) {
    if (stat->defined() && !(stat->shape() == Shape{channels})) {
      fail("batch_norm", "running statistics should have shape (", channels, ",), one value per channel of input ", input.shape(),
           ", got ", stat->shape());
    }
  }
  const BatchNormTrainResult result = batch_norm_train(input, weight, bias, eps);
  if (running_mean.defined()) {
    // Running statistics are state, not part of the differentiated computation. The running
    // variance is the unbiased batch variance, recovered from invstd = 1 / sqrt(biased var + eps).
    const bool grad_mode = is_grad_enabled();
    set_grad_enabled(false);
    const double count = static_cast<double>(input.numel() / channels);
    const Tensor unbiased_var = (1.0 / (result.invstd * result.invstd) - eps) * (count / (count - 1));
    Tensor mean_state = running_mean, var_state = running_var;
    mean_state.copy_(running_mean * (1.0 - momentum) + result.mean * momentum);
    var_state.copy_(running_var * (1.0 - momentum) + unbiased_var * momentum);
    set_grad_enabled(grad_mode);
  }
  return result.out;
}

Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  if (input.dim() < 2 || num_groups < 1 || input.size(1) % num_groups != 0) {
    fail("group_norm", "expected input (N,C,...) with C divisible by num_groups ", num_groups, ", got ", input.shape());
  }
  const Tensor y = normalize(input.reshape({input.size(0), num_groups, -1}), {2}, eps).reshape(input.shape());
  return affine(y, weight, bias, channel_shape(input.size(1), input.dim()));
}

Tensor rms_norm(const Tensor& input, const std::vector<int64_t>& normalized_shape, const Tensor& weight, std::optional<double> eps) {
  const int64_t normalized_ndim = static_cast<int64_t>(normalized_shape.size());
  FLOW_ARG_CHECK(normalized_ndim >= 1, "rms_norm",
                 "Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one element, but got normalized_shape = ",
                 Shape(normalized_shape));
  FLOW_ARG_CHECK(!weight.defined() || weight.shape() == Shape(normalized_shape), "rms_norm",
                 "Expected weight to be of same shape as normalized_shape, but got weight of shape ", weight.shape(),
                 " and normalized_shape = ", Shape(normalized_shape));
  const Shape& shape = input.shape();
  bool matches = input.dim() >= normalized_ndim;
  for (int64_t i = 0; matches && i < normalized_ndim; ++i) matches = shape[input.dim() - normalized_ndim + i] == normalized_shape[i];
  if (!matches) {
    std::string expected = "(*";
    for (int64_t size : normalized_shape) expected += ", " + std::to_string(size);
    fail("rms_norm", "Given normalized_shape=", Shape(normalized_shape), ", expected input with shape ", expected, "), but got input of size ",
         shape);
  }
  FLOW_ARG_CHECK(input.is_floating_point(), "rms_norm", "expected a floating point input, got ", dtype_name(input.dtype()));
  std::vector<int64_t> dims;
  for (int64_t d = input.dim() - normalized_ndim; d < input.dim(); ++d) dims.push_back(d);
  const double default_eps = input.dtype() == kFloat64 ? std::numeric_limits<double>::epsilon() : std::numeric_limits<float>::epsilon();
  const Tensor y = input * rsqrt(mean(pow(input, 2), dims, true) + eps.value_or(default_eps));
  return weight.defined() ? y * weight : y;
}

Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx) {
  if (weight.dim() != 2) fail("embedding", "weight must be 2-d (num_embeddings, embedding_dim), got ", weight.shape());
  const int64_t rows = weight.size(0);
  FLOW_ARG_CHECK(!padding_idx || (*padding_idx >= -rows && *padding_idx < rows), "embedding", "Padding_idx must be within num_embeddings, got ",
                 *padding_idx, " for ", rows, " embeddings");
  Shape out = indices.shape();
  out.push_back(weight.size(1));
  const Tensor flat = indices.reshape({-1});
  Tensor selected = index_select(weight, 0, flat);
  if (padding_idx) {
    // The padding positions take the row's value from a detached copy, so no gradient reaches it.
    const int64_t row = *padding_idx < 0 ? *padding_idx + rows : *padding_idx;
    selected = where(eq(flat, row).unsqueeze(1), selected.detach(), selected);
  }
  return selected.reshape(out);
}

Tensor relu6(const Tensor& input) { return clamp(input, 0, 6); }

Tensor leaky_relu(const Tensor& input, double negative_slope) { return where(gt(input, 0), input, input * negative_slope); }

Tensor dropout(const Tensor& input, double p, bool training) {
  FLOW_ARG_CHECK(p >= 0 && p <= 1, "dropout", "probability has to be between 0 and 1, but got ", p);
  if (!training || p == 0) return input;
  if (p == 1) return input * 0.0;
  // rand_like: a global input gets a global mask of its layout (each rank draws its piece).
  const Tensor keep = lt(rand_like(input), 1.0 - p);
  return where(keep, input * (1.0 / (1.0 - p)), 0);
}

namespace {

// Constant padding one dim at a time: negative entries crop, positive ones add blocks of value
// (cat carries the gradient).
Tensor constant_pad(const Tensor& input, const std::vector<int64_t>& pad, double value) {
  Tensor out = input;
  for (size_t pair = 0; pair < pad.size() / 2; ++pair) {
    const int64_t dim = input.dim() - 1 - static_cast<int64_t>(pair);
    const int64_t before = pad[2 * pair], after = pad[2 * pair + 1];
    const int64_t size = out.size(dim);
    FLOW_ARG_CHECK(size + before + after >= 0, "pad", "The input size ", size, ", plus negative padding ", before, " and ", after,
                   " resulted in a negative output size, which is invalid. Check dimension ", dim, " of your input.");
    const int64_t crop_before = std::max<int64_t>(0, -before), crop_after = std::max<int64_t>(0, -after);
    out = out.narrow(dim, crop_before, size - crop_before - crop_after);
    TensorList pieces;
    auto block = [&](int64_t length) {
      Shape shape = out.shape();
      shape[static_cast<size_t>(dim)] = length;
      return full(shape, value, options_beside(out));
    };
    if (before > 0) pieces.push_back(block(before));
    pieces.push_back(out);
    if (after > 0) pieces.push_back(block(after));
    if (pieces.size() > 1) out = cat(pieces, dim);
  }
  return out;
}

// PyTorch's letters for the padded dims in its size errors, the last dim first.
const char* dim_letter(size_t pair) { return pair == 0 ? "W" : pair == 1 ? "H" : "D"; }

// Reflect and replicate read input position i = j - before for output j, mapped into [0, size):
// mirrored about the edge elements, or clamped to them. One index_select per dim gives the
// gradient (a scatter_add, summing the repeated reads) and its gradient in turn.
Tensor gather_pad(const Tensor& input, int64_t dim, int64_t before, int64_t after, bool reflect) {
  const int64_t size = input.size(dim);
  std::vector<int64_t> source;
  source.reserve(static_cast<size_t>(size + before + after));
  for (int64_t i = -before; i < size + after; ++i) {
    if (reflect) source.push_back(i < 0 ? -i : i >= size ? 2 * (size - 1) - i : i);
    else source.push_back(std::clamp<int64_t>(i, 0, size - 1));
  }
  return index_select(input, dim, tensor(source, std::nullopt, options_beside(input).dtype(kInt64)));
}

// Circular padding as PyTorch computes it: negative entries crop first, then the positive ones
// copy the far end of what is left (narrow and cat carry the gradient).
Tensor circular_pad(const Tensor& input, int64_t dim, int64_t before, int64_t after) {
  const int64_t size = input.size(dim);
  const int64_t crop_before = std::max<int64_t>(0, -before), crop_after = std::max<int64_t>(0, -after);
  const Tensor kept = input.narrow(dim, crop_before, size - crop_before - crop_after);
  const int64_t length = kept.size(dim);
  // PyTorch checks against the uncropped size; past the cropped one its copies read its own
  // unwritten output, so flow refuses that case too.
  FLOW_ARG_CHECK(before <= length && after <= length, "pad", "Padding value causes wrapping around more than once.");
  TensorList pieces;
  if (before > 0) pieces.push_back(kept.narrow(dim, length - before, before));
  pieces.push_back(kept);
  if (after > 0) pieces.push_back(kept.narrow(dim, 0, after));
  return pieces.size() > 1 ? cat(pieces, dim) : kept;
}

}  // namespace

Tensor pad(const Tensor& input, const std::vector<int64_t>& pad, const std::string& mode, double value) {
  constexpr const char* kOp = "pad";
  const auto pairs = pad.size() / 2;
  FLOW_ARG_CHECK(pad.size() % 2 == 0, kOp, "Padding length must be divisible by 2");
  FLOW_ARG_CHECK(static_cast<int64_t>(pairs) <= input.dim(), kOp,
                 "Padding length should be less than or equal to two times the input dimension but got padding length ", pad.size(),
                 " and input of dimension ", input.dim());
  if (mode == "constant") return constant_pad(input, pad, value);
  const bool reflect = mode == "reflect", circular = mode == "circular";
  if (!reflect && !circular && mode != "replicate") fail(kOp, "Unrecognised padding mode ", mode);
  FLOW_ARG_CHECK(value == 0, kOp, "Padding mode \"", mode, "\" doesn't take in value argument");
  // 1, 2 or 3 padded dims behind one or two leading (batch, channel) dims, as PyTorch's
  // ReflectionPad/ReplicationPad/circular 1d, 2d and 3d.
  FLOW_ARG_CHECK(pairs >= 1 && pairs <= 3 && input.dim() >= static_cast<int64_t>(pairs) + 1 && input.dim() <= static_cast<int64_t>(pairs) + 2,
                 kOp, "Only 2D, 3D, 4D, 5D padding with non-constant padding are supported for now; mode '", mode, "' with padding length ",
                 pad.size(), " takes a ", pairs + 1, "-d or ", pairs + 2, "-d input, got ", input.shape());
  if (!circular) {
    // The kernels PyTorch runs need every dim but a batch dim non-empty.
    const int64_t first = input.dim() == static_cast<int64_t>(pairs) + 2 ? 1 : 0;
    for (int64_t d = first; d < input.dim(); ++d) {
      FLOW_ARG_CHECK(input.size(d) != 0, kOp, "Expected ", pairs + 1, "D or ", pairs + 2,
                     "D (batch mode) tensor with possibly 0 batch size and other non-zero dimensions for input, but got: ", input.shape());
    }
  }
  Tensor out = input;
  for (size_t pair = 0; pair < pairs; ++pair) {
    const int64_t dim = input.dim() - 1 - static_cast<int64_t>(pair);
    const int64_t before = pad[2 * pair], after = pad[2 * pair + 1];
    const int64_t size = input.size(dim), padded = size + before + after;
    if (circular) {
      FLOW_ARG_CHECK(before <= size && after <= size, kOp, "Padding value causes wrapping around more than once.");
      FLOW_ARG_CHECK(padded >= 0, kOp, "Negative padding value is resulting in an empty dimension.");
      out = circular_pad(out, dim, before, after);
      continue;
    }
    if (reflect) {
      FLOW_ARG_CHECK(before < size && after < size, kOp,
                     "Padding size should be less than the corresponding input dimension, but got: padding (", before, ", ", after,
                     ") at dimension ", dim, " of input ", input.shape());
    }
    FLOW_ARG_CHECK(padded >= 1, kOp, "input (", dim_letter(pair), ": ", size, ") is too small. Calculated output ", dim_letter(pair), ": ",
                   padded);
    out = gather_pad(out, dim, before, after, reflect);
  }
  return out;
}

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_mask,
                                    double dropout_p, bool is_causal, std::optional<double> scale) {
  constexpr const char* kOp = "scaled_dot_product_attention";
  FLOW_ARG_CHECK(dropout_p >= 0 && dropout_p <= 1, kOp, "dropout_p has to be between 0 and 1, but got ", dropout_p);
  // Global inputs with dropout take the composite formula: its dropout draws each rank's piece of
  // the logical weights, where the fused kernel's pieces would all read the same counters.
  const bool global = query.is_global() || key.is_global() || value.is_global();
  if (dropout_p < 1 && !(global && dropout_p > 0)) return flash_attention(query, key, value, attn_mask, is_causal, scale, dropout_p);
  check_attention_args(query, key, value, attn_mask, is_causal, scale);
  const int64_t length = query.size(-2), keys = key.size(-2);
  Tensor scores = matmul(query, key.transpose(-2, -1)) * scale.value_or(1.0 / std::sqrt(static_cast<double>(query.size(-1))));
  Tensor allowed;
  if (is_causal) {
    // Beside the scores: global (broadcast) when they are, so that the mask meets them there.
    const TensorOptions positions = options_beside(scores).dtype(kInt64);
    allowed = ge(arange(length, positions).unsqueeze(1), arange(keys, positions).unsqueeze(0));
  } else if (attn_mask.defined() && attn_mask.dtype() == kBool) {
    allowed = attn_mask;
  } else if (attn_mask.defined()) {
    scores = scores + attn_mask;
  }
  if (allowed.defined()) scores = masked_fill(scores, logical_not(allowed), -INFINITY);
  return matmul(dropout(safe_softmax(scores, -1), dropout_p, /*training=*/true), value);
}

Tensor safe_softmax(const Tensor& input, int64_t dim) {
  const Tensor sees_nothing = eq(max(input, dim, /*keepdim=*/true).values, -INFINITY);
  return masked_fill(softmax(input, dim), sees_nothing, 0.0);
}

Reduction reduction_from_string(const std::string& reduction) {
  if (reduction == "none") return Reduction::kNone;
  if (reduction == "mean") return Reduction::kMean;
  if (reduction == "sum") return Reduction::kSum;
  fail("loss", "reduction must be 'none', 'mean' or 'sum', got '", reduction, "'");
}

Tensor nll_loss(const Tensor& input, const Tensor& target, const NLLLossOptions& options) {
  auto [log_probs, classes] = flatten_classes(input, target, "nll_loss");
  const Tensor valid = validity(classes, options.ignore_index_);
  const Tensor safe = where(valid, classes, 0);
  const Tensor picked = neg(gather(log_probs, 1, safe.unsqueeze(1)).squeeze(1));
  return reduce_class_losses(where(valid, picked, 0), valid, target, options.reduction_);
}

Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyLossOptions& options) {
  FLOW_ARG_CHECK(options.label_smoothing_ >= 0 && options.label_smoothing_ <= 1, "cross_entropy",
                 "label_smoothing must be in [0, 1], got ", options.label_smoothing_);
  if (input.dim() < 1) fail("cross_entropy", "input must have at least one dimension, got a 0-d tensor");
  if (options.label_smoothing_ == 0 && input.dim() <= 2 && !input.device().is_cuda()) {
    // One fused op per row (no (N, C) log-probabilities kept for backward): the same losses.
    auto [logits, classes] = flatten_classes(input, target, "cross_entropy");
    return reduce_class_losses(sparse_softmax_cross_entropy(logits, classes, options.ignore_index_), validity(classes, options.ignore_index_),
                               target, options.reduction_);
  }
  const int64_t class_dim = input.dim() == 1 ? 0 : 1;
  const Tensor log_probs = log_softmax(input, class_dim);
  const NLLLossOptions nll = NLLLossOptions().ignore_index(options.ignore_index_).reduction(options.reduction_);
  if (options.label_smoothing_ == 0) return nll_loss(log_probs, target, nll);
  // (1 - eps) * nll + eps * mean over classes of -log p, over the non-ignored elements.
  const double eps = options.label_smoothing_;
  const Tensor per_element = nll_loss(log_probs, target, NLLLossOptions(nll).reduction(Reduction::kNone));
  auto [flat_log_probs, classes] = flatten_classes(log_probs, target, "cross_entropy");
  const Tensor valid = validity(classes, options.ignore_index_);
  const Tensor smooth = where(valid, neg(mean(flat_log_probs, {1})), 0).reshape(per_element.shape());
  return reduce_class_losses(per_element * (1.0 - eps) + smooth * eps, valid, target, options.reduction_);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  const Tensor diff = input - target;
  return reduce(diff * diff, reduction);
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  FLOW_ARG_CHECK(beta >= 0, "smooth_l1_loss", "beta must be non-negative, got ", beta);
  const Tensor diff = abs(input - target);
  if (beta == 0) return reduce(diff, reduction);
  return reduce(where(lt(diff, beta), diff * diff * (0.5 / beta), diff - 0.5 * beta), reduction);
}

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (!(input.shape() == target.shape())) {
    fail("binary_cross_entropy", "target ", target.shape(), " and input ", input.shape(), " must have the same shape");
  }
  return reduce(binary_cross_entropy_elementwise(input, to(target, input.dtype())), reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (!(input.shape() == target.shape())) {
    fail("binary_cross_entropy_with_logits", "target ", target.shape(), " and input ", input.shape(), " must have the same shape");
  }
  return reduce(relu(input) - input * target + log(exp(neg(abs(input))) + 1.0), reduction);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) { return reduce(abs(input - target), reduction); }

}  // namespace flow::nn::functional
