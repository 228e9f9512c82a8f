#include "nn/functional.h"

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

}  // namespace

Tensor relu6(const Tensor& input) { return clamp(input, 0, 6); }

Tensor leaky_relu(const Tensor& input, double negative_slope) { return where(gt(input, 0), input, input * negative_slope); }

Tensor dropout(const Tensor& input, double p, bool training) {
  FLOW_ARG_CHECK(p >= 0 && p <= 1, "dropout", "probability has to be between 0 and 1, but got ", p);
  if (!training || p == 0) return input;
  if (p == 1) return input * 0.0;
  const Tensor keep = lt(rand(input.shape(), TensorOptions(input.dtype()).device(input.device())), 1.0 - p);
  return where(keep, input * (1.0 / (1.0 - p)), 0);
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
  const Tensor losses = where(valid, picked, 0);
  if (options.reduction_ == Reduction::kMean) return sum(losses) / sum(to(valid, losses.dtype()));
  const Tensor shaped = target.dim() == 0 ? losses.reshape({}) : losses.reshape(target.shape());
  return reduce(shaped, options.reduction_);
}

Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyLossOptions& options) {
  FLOW_ARG_CHECK(options.label_smoothing_ >= 0 && options.label_smoothing_ <= 1, "cross_entropy",
                 "label_smoothing must be in [0, 1], got ", options.label_smoothing_);
  if (input.dim() < 1) fail("cross_entropy", "input must have at least one dimension, got a 0-d tensor");
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
  const Tensor losses = per_element * (1.0 - eps) + smooth * eps;
  if (options.reduction_ == Reduction::kMean) return sum(losses) / sum(to(valid, losses.dtype()));
  return reduce(losses, options.reduction_);
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
  const Tensor log_p = clamp(log(input), -100.0, std::nullopt);
  const Tensor log_not_p = clamp(log(1.0 - input), -100.0, std::nullopt);
  return reduce(neg(target * log_p + (1.0 - target) * log_not_p), reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (!(input.shape() == target.shape())) {
    fail("binary_cross_entropy_with_logits", "target ", target.shape(), " and input ", input.shape(), " must have the same shape");
  }
  return reduce(relu(input) - input * target + log(exp(neg(abs(input))) + 1.0), reduction);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) { return reduce(abs(input - target), reduction); }

}  // namespace flow::nn::functional
