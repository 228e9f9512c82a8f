#pragma once
// The shared gradient checker: analytic gradients from the autograd engine against central
// finite differences, in float64. Every differentiable op and module is run through it.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "autograd/engine.h"
#include "core/flow.h"
#include "core/grad_mode.h"

namespace flow::testing {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
};

// fn maps the inputs (float64 tensors; those with requires_grad are checked) to one output.
// The output is reduced with fixed random weights, so every output element's gradient counts.
inline ::testing::AssertionResult gradcheck(const std::function<Tensor(const TensorList&)>& fn, TensorList inputs,
                                            const GradcheckOptions& options = {}) {
  for (auto& input : inputs) {
    if (input.requires_grad() && input.dtype() != kFloat64) {
      return ::testing::AssertionFailure() << "gradcheck needs float64 inputs";
    }
  }
  Tensor out = fn(inputs);
  const Tensor weights = randn(out.shape(), kFloat64);
  auto scalar_of = [&](const Tensor& y) { return sum(y * weights); };
  TensorList wanted;
  for (auto& input : inputs) {
    if (input.requires_grad()) wanted.push_back(input);
  }
  const TensorList analytic = autograd::grad({scalar_of(out)}, wanted, {}, false, false, true);
  // Numeric evaluation keeps grad mode on: fn may itself differentiate (second-order checks).
  size_t k = 0;
  for (auto& input : inputs) {
    if (!input.requires_grad()) continue;
    const Tensor expected = analytic[k++];
    double* data = input.data_ptr<double>();
    for (int64_t i = 0; i < input.numel(); ++i) {
      // Perturb element i of the (contiguous) input in place.
      const double original = data[i];
      data[i] = original + options.eps;
      const double plus = scalar_of(fn(inputs)).item<double>();
      data[i] = original - options.eps;
      const double minus = scalar_of(fn(inputs)).item<double>();
      data[i] = original;
      const double numeric = (plus - minus) / (2 * options.eps);
      const double got = expected.defined() ? expected.contiguous().data_ptr<double>()[i] : 0.0;
      if (std::abs(got - numeric) > options.atol + options.rtol * std::abs(numeric)) {
        return ::testing::AssertionFailure() << "input " << k - 1 << " element " << i << ": analytic " << got
                                             << " vs numeric " << numeric;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// A float64 leaf tensor with random values that requires grad.
inline Tensor grad_input(const Shape& shape, double low = -1.0, double high = 1.0) {
  Tensor t = rand(shape, kFloat64) * (high - low) + low;
  return t.detach().requires_grad_(true);
}

}  // namespace flow::testing
