#include "nn/init.h"

#include <cmath>

#include "core/grad_mode.h"
#include "core/ops/all.h"

namespace flow::nn::init {
namespace {
TensorOptions options_of(const Tensor& t) { return TensorOptions(t.dtype()).device(t.device()); }

Tensor& assign(Tensor& tensor, const Tensor& value) {
  autograd::NoGradGuard no_grad;
  tensor.copy_(value);
  return tensor;
}

int64_t fan(const Tensor& tensor, const std::string& mode) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(tensor);
  if (mode == "fan_in") return fan_in;
  if (mode == "fan_out") return fan_out;
  fail("kaiming", "mode ", mode, " not supported, please use one of fan_in, fan_out");
}
}  // namespace

Tensor& uniform_(Tensor& tensor, double a, double b) {
  return assign(tensor, rand(tensor.shape(), options_of(tensor)) * (b - a) + a);
}

Tensor& normal_(Tensor& tensor, double mean, double std) {
  return assign(tensor, randn(tensor.shape(), options_of(tensor)) * std + mean);
}

Tensor& constant_(Tensor& tensor, double value) {
  autograd::NoGradGuard no_grad;
  tensor.fill_(value);
  return tensor;
}
Tensor& zeros_(Tensor& tensor) { return constant_(tensor, 0.0); }
Tensor& ones_(Tensor& tensor) { return constant_(tensor, 1.0); }

double calculate_gain(const std::string& nonlinearity, double param) {
  if (nonlinearity == "linear" || nonlinearity == "sigmoid" || nonlinearity.rfind("conv", 0) == 0) return 1.0;
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  if (nonlinearity == "selu") return 3.0 / 4.0;
  fail("calculate_gain", "unsupported nonlinearity ", nonlinearity);
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& tensor) {
  if (tensor.dim() < 2) {
    fail("init", "fan in and fan out can not be computed for a tensor with fewer than 2 dimensions, got shape ",
         tensor.shape());
  }
  int64_t receptive = 1;
  for (int64_t d = 2; d < tensor.dim(); ++d) receptive *= tensor.size(d);
  return {tensor.size(1) * receptive, tensor.size(0) * receptive};
}

Tensor& kaiming_uniform_(Tensor& tensor, double a, const std::string& mode, const std::string& nonlinearity) {
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan(tensor, mode)));
  const double bound = std::sqrt(3.0) * std;
  return uniform_(tensor, -bound, bound);
}

Tensor& kaiming_normal_(Tensor& tensor, double a, const std::string& mode, const std::string& nonlinearity) {
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan(tensor, mode)));
  return normal_(tensor, 0.0, std);
}

Tensor& xavier_uniform_(Tensor& tensor, double gain) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(tensor);
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  return uniform_(tensor, -bound, bound);
}

Tensor& xavier_normal_(Tensor& tensor, double gain) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(tensor);
  return normal_(tensor, 0.0, gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)));
}

}  // namespace flow::nn::init
