#pragma once
// nn::init: in-place initialisers with PyTorch's names, defaults and fan computations.
// They run without recording gradients and draw from the default generator (manual_seed).
#include <string>

#include "core/tensor.h"

namespace flow::nn::init {

Tensor& uniform_(Tensor& tensor, double a = 0.0, double b = 1.0);
Tensor& normal_(Tensor& tensor, double mean = 0.0, double std = 1.0);
Tensor& constant_(Tensor& tensor, double value);
Tensor& zeros_(Tensor& tensor);
Tensor& ones_(Tensor& tensor);
// gain for a nonlinearity: "linear", "conv*", "sigmoid" -> 1, "tanh" -> 5/3, "relu" -> sqrt(2),
// "leaky_relu" -> sqrt(2 / (1 + param^2)), "selu" -> 3/4.
double calculate_gain(const std::string& nonlinearity, double param = 0.01);
// (fan_in, fan_out) of a weight of at least 2 dims: dim 1 and dim 0 times the receptive field.
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& tensor);
// mode: "fan_in" or "fan_out".
Tensor& kaiming_uniform_(Tensor& tensor, double a = 0.0, const std::string& mode = "fan_in",
                         const std::string& nonlinearity = "leaky_relu");
Tensor& kaiming_normal_(Tensor& tensor, double a = 0.0, const std::string& mode = "fan_in",
                        const std::string& nonlinearity = "leaky_relu");
Tensor& xavier_uniform_(Tensor& tensor, double gain = 1.0);
Tensor& xavier_normal_(Tensor& tensor, double gain = 1.0);

}  // namespace flow::nn::init
