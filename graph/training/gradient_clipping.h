#pragma once
// Training rewrite "gradient_clipping" (optim::ParamGroup::clip_grad_max_norm, OneFlow's
// per-parameter-group clip_grad_max_norm and clip_grad_norm_type): the gradients of each
// clipping group are scaled as nn::utils::clip_grad_norm_ scales them, on the gradients the update
// reads: averaged over the micro-batches, reduced over the data-parallel ranks and unscaled
// (PyTorch's AMP recipe: unscale_, clip, step). Each group's total norm is over its parameters
// that have a gradient in the Job; it is traced, so a non-finite norm is not an error (a grad
// scaler skips that step anyway).
#include <string>

#include "core/tensor.h"
#include "optim/optimizer.h"

namespace flow::graph::training {

// Clips the gradients of `params` (the optimizer's parameters with a traced gradient) group by
// group. Returns whether a group clipped. Throws flow::Error naming `graph` for invalid clipping
// settings or a group whose gradients are on several placements.
bool clip_gradients(const optim::Optimizer& optimizer, const TensorList& params, const std::string& graph);

}  // namespace flow::graph::training
