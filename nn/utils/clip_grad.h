#pragma once
// Gradient clipping, as torch.nn.utils: clip_grad_norm_ (= get_total_norm of the gradients, then
// clip_grads_with_norm_) and clip_grad_value_. Parameters without a gradient are skipped; the
// gradients are changed in place, outside autograd (nothing is recorded). On global tensors the
// norms are those of the logical gradients: the ops go through the SPMD dispatch, which reduces
// over the ranks where a gradient is split or partial. nn::Graph clips per parameter group in
// its Job instead (the "gradient_clipping" training rewrite, optim::ParamGroup::clip_grad_max_norm).
//
// Unlike PyTorch, which accepts them, a negative or NaN max_norm or clip_value (they would flip
// the gradients' signs) and a norm_type that is not positive (0, negative, -inf, NaN) are errors.
#include "core/tensor.h"

namespace flow::nn::utils {

// The norm_type-norm of the tensors' norms, which is the norm of all their elements together;
// norm_type inf: the largest absolute value. Each norm is in its tensor's dtype and the total in
// their promoted dtype, as in PyTorch (16-bit values are summed in float32). No tensors: a
// float32 0. Global tensors must share one placement. error_if_nonfinite: a flow::Error when the
// total is NaN or infinite. Throws naming get_total_norm.
Tensor get_total_norm(const TensorList& tensors, double norm_type = 2.0, bool error_if_nonfinite = false);

// Multiplies each gradient in place by min(max_norm / (total_norm + 1e-6), 1).
void clip_grads_with_norm_(const TensorList& parameters, double max_norm, const Tensor& total_norm);
void clip_grads_with_norm_(const Tensor& parameter, double max_norm, const Tensor& total_norm);

// Scales the gradients so that their total norm_type-norm is at most max_norm; returns the total
// norm before clipping (0-d).
Tensor clip_grad_norm_(const TensorList& parameters, double max_norm, double norm_type = 2.0, bool error_if_nonfinite = false);
Tensor clip_grad_norm_(const Tensor& parameter, double max_norm, double norm_type = 2.0, bool error_if_nonfinite = false);

// Clamps every gradient element into [-clip_value, clip_value].
void clip_grad_value_(const TensorList& parameters, double clip_value);
void clip_grad_value_(const Tensor& parameter, double clip_value);

}  // namespace flow::nn::utils
