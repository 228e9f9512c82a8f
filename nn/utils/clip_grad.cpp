#include "nn/utils/clip_grad.h"

#include <cmath>

#include "core/error.h"
#include "core/grad_mode.h"
#include "core/ops/all.h"

namespace flow::nn::utils {
namespace {

void check_norm_type(const char* op, double norm_type) {
  FLOW_ARG_CHECK(norm_type > 0, op, "norm_type must be positive or inf, got ", norm_type);
}

void check_defined(const char* op, const TensorList& tensors) {
  for (size_t i = 0; i < tensors.size(); ++i) FLOW_ARG_CHECK(tensors[i].defined(), op, "tensor ", i, " is undefined");
}

TensorList grads_of(const char* op, const TensorList& parameters) {
  check_defined(op, parameters);
  TensorList grads;
  for (const Tensor& p : parameters) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  return grads;
}

// torch.linalg.vector_norm of all elements, in x's dtype; 16-bit values are summed in float32.
Tensor vector_norm(const Tensor& x, double norm_type) {
  const Tensor wide = is_reduced_floating(x.dtype()) ? x.to(kFloat32) : x;
  Tensor norm;
  if (std::isinf(norm_type)) norm = max(abs(wide));
  else if (norm_type == 1) norm = sum(abs(wide));
  else if (norm_type == 2) norm = sqrt(sum(wide * wide));
  else norm = pow(sum(pow(abs(wide), norm_type)), 1.0 / norm_type);
  return norm.to(x.dtype());
}

// Every tensor local, or every tensor global on one placement: the norms are stacked into one
// tensor, which the SPMD dispatch cannot do across placements.
void check_one_placement(const char* op, const TensorList& tensors) {
  for (const Tensor& t : tensors) {
    if (t.is_global() != tensors[0].is_global()) fail(op, "got both local and global tensors");
    if (t.is_global() && !(t.placement() == tensors[0].placement())) {
      fail(op, "global tensors on different placements: ", tensors[0].placement().str(), " and ", t.placement().str());
    }
  }
}

Tensor norm_of_all(const char* op, const TensorList& tensors, double norm_type, bool error_if_nonfinite) {
  check_norm_type(op, norm_type);
  check_defined(op, tensors);
  check_one_placement(op, tensors);
  autograd::NoGradGuard no_grad;
  TensorList norms;
  for (const Tensor& t : tensors) {
    // An empty tensor adds nothing to any norm (and max has no value to reduce).
    if (t.numel() > 0) norms.push_back(vector_norm(t.detach(), norm_type));
  }
  if (norms.empty()) return scalar_tensor(0.0, TensorOptions(kFloat32));
  if (!norms[0].is_global()) {
    for (Tensor& norm : norms) norm = norm.to(norms[0].device());
  }
  const Tensor total = vector_norm(stack(norms), norm_type);
  if (error_if_nonfinite && !std::isfinite(total.item<double>())) {
    fail(op, "the total norm of order ", norm_type,
         " for gradients from `parameters` is non-finite, so it cannot be clipped. To disable this error and scale the gradients by "
         "the non-finite norm anyway, set `error_if_nonfinite=false`");
  }
  return total;
}

}  // namespace

Tensor get_total_norm(const TensorList& tensors, double norm_type, bool error_if_nonfinite) {
  return norm_of_all("get_total_norm", tensors, norm_type, error_if_nonfinite);
}

void clip_grads_with_norm_(const TensorList& parameters, double max_norm, const Tensor& total_norm) {
  constexpr const char* kOp = "clip_grads_with_norm_";
  FLOW_ARG_CHECK(max_norm >= 0, kOp, "max_norm must be non-negative, got ", max_norm);
  FLOW_ARG_CHECK(total_norm.defined() && total_norm.numel() == 1, kOp, "total_norm must be a one-element tensor");
  TensorList grads = grads_of(kOp, parameters);
  if (grads.empty()) return;
  autograd::NoGradGuard no_grad;
  const Tensor coef = clamp(max_norm / (total_norm.detach() + 1e-6), std::nullopt, Scalar(1.0));
  for (Tensor& g : grads) {
    // Multiplied by 1 when under max_norm, as PyTorch does, to stay free of a data-dependent branch.
    const Tensor scale = coef.is_global() ? coef : coef.to(g.device());
    g.copy_(g * scale.to(g.dtype()));
  }
}

void clip_grads_with_norm_(const Tensor& parameter, double max_norm, const Tensor& total_norm) {
  clip_grads_with_norm_(TensorList{parameter}, max_norm, total_norm);
}

Tensor clip_grad_norm_(const TensorList& parameters, double max_norm, double norm_type, bool error_if_nonfinite) {
  constexpr const char* kOp = "clip_grad_norm_";
  FLOW_ARG_CHECK(max_norm >= 0, kOp, "max_norm must be non-negative, got ", max_norm);
  const Tensor total = norm_of_all(kOp, grads_of(kOp, parameters), norm_type, error_if_nonfinite);
  clip_grads_with_norm_(parameters, max_norm, total);
  return total;
}

Tensor clip_grad_norm_(const Tensor& parameter, double max_norm, double norm_type, bool error_if_nonfinite) {
  return clip_grad_norm_(TensorList{parameter}, max_norm, norm_type, error_if_nonfinite);
}

void clip_grad_value_(const TensorList& parameters, double clip_value) {
  constexpr const char* kOp = "clip_grad_value_";
  FLOW_ARG_CHECK(clip_value >= 0, kOp, "clip_value must be non-negative, got ", clip_value);
  TensorList grads = grads_of(kOp, parameters);
  autograd::NoGradGuard no_grad;
  for (Tensor& g : grads) g.copy_(clamp(g, Scalar(-clip_value), Scalar(clip_value)));
}

void clip_grad_value_(const Tensor& parameter, double clip_value) { clip_grad_value_(TensorList{parameter}, clip_value); }

}  // namespace flow::nn::utils
