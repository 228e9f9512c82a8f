#pragma once
#include <optional>

#include "core/tensor.h"

namespace flow {

// Element-wise math; integer inputs to floating functions (exp, sin, sigmoid, ...) give float32.
Tensor neg(const Tensor& input);
Tensor abs(const Tensor& input);
// -1, 0 or 1 by the sign of each element.
Tensor sign(const Tensor& input);
Tensor exp(const Tensor& input);
Tensor log(const Tensor& input);
Tensor sqrt(const Tensor& input);
Tensor rsqrt(const Tensor& input);
Tensor sin(const Tensor& input);
Tensor cos(const Tensor& input);
Tensor tanh(const Tensor& input);
Tensor sigmoid(const Tensor& input);
Tensor relu(const Tensor& input);
// approximate: "none" (erf form, the default) or "tanh", as in PyTorch.
Tensor gelu(const Tensor& input, const std::string& approximate = "none");
Tensor silu(const Tensor& input);
// log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold (for stability), as
// torch.nn.functional.softplus.
Tensor softplus(const Tensor& input, double beta = 1.0, double threshold = 20.0);
Tensor clamp(const Tensor& input, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor logical_not(const Tensor& input);

}  // namespace flow
