#pragma once
// Shared by the batch norm kernels (loops and oneDNN): the input viewed as (N, C, S), and the
// per-channel coefficients of the training gradient.
#include <cstdint>

#include "core/op.h"

namespace flow::cpu {

struct NormLayout {
  int64_t n, c, s;                         // s: product of the dims after the channel dim
  int64_t count() const { return n * s; }  // values per channel
};

inline NormLayout norm_layout(const Shape& shape) {
  int64_t s = 1;
  for (int64_t d = 2; d < shape.ndim(); ++d) s *= shape[d];
  return {shape[0], shape[1], s};
}

// One channel's input gradient of training batch norm is dy_coef * dy + centered_coef * (x - mean)
// + shift: the closed form through the normalised output, plus the paths through the mean and
// invstd outputs (grad_mean, grad_invstd). With weight 0 only those two paths remain.
struct BatchNormGradCoefficients {
  double dy_coef, centered_coef, shift;
  BatchNormGradCoefficients(int64_t count, double invstd, double weight, double sum_dy, double sum_dy_centered, double grad_mean,
                            double grad_invstd) {
    const double m = static_cast<double>(count), invstd3 = invstd * invstd * invstd;
    dy_coef = weight * invstd;
    centered_coef = -(weight * invstd3 * sum_dy_centered + grad_invstd * invstd3) / m;
    shift = (grad_mean - weight * invstd * sum_dy) / m;
  }
};

}  // namespace flow::cpu
