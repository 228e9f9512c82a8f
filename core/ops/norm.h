#pragma once
#include <vector>

#include "core/tensor.h"

namespace flow {

// Batch normalization of input (N, C, ...) with given per-channel statistics (inference):
// (input - running_mean) / sqrt(running_var + eps) * weight + bias, weight and bias optional.
Tensor batch_norm_eval(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight = Tensor(),
                       const Tensor& bias = Tensor(), double eps = 1e-5);

// Batch normalization with the batch's own statistics over every dim but 1 (training). Besides
// the output it returns, per channel, the batch mean and invstd = 1 / sqrt(biased variance + eps).
struct BatchNormTrainResult {
  Tensor out;
  Tensor mean;
  Tensor invstd;
};
BatchNormTrainResult batch_norm_train(const Tensor& input, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                                      double eps = 1e-5);

// Layer normalization over the last `normalized_shape.size()` dims of input:
// (input - mean) / sqrt(var + eps) * weight + bias with the biased variance of each row, weight
// and bias of shape normalized_shape (optional). One primitive op "layer_norm" (outputs out,
// mean and rstd per row) with the closed-form gradient op "layer_norm_grad".
Tensor layer_norm(const Tensor& input, const std::vector<int64_t>& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

}  // namespace flow
