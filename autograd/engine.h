#pragma once
#include <functional>
#include <vector>

#include "core/tensor.h"

namespace flow::autograd {

// Accumulates d(sum of outputs·grad_outputs)/d(leaf) into every reachable leaf's grad().
// grad_outputs may be empty (each output must then be a one-element tensor) or one per output.
void backward(const TensorList& outputs, const TensorList& grad_outputs = {}, bool retain_graph = false,
              bool create_graph = false);

// Returns d(outputs)/d(inputs) without touching any grad(). With create_graph the result is
// itself differentiable (higher-order gradients). An input the outputs do not depend on is an
// error unless allow_unused, which returns an undefined tensor for it.
TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs = {},
                bool retain_graph = false, bool create_graph = false, bool allow_unused = false);

// While alive, backward() on this thread seeds each output it is given no gradient for with
// `scale` (one element, cast to the output's dtype) instead of one: nn::Graph's grad scaler scales
// the loss of the loss.backward() its build() calls this way. grad() is not affected.
class LossScaleGuard {
 public:
  explicit LossScaleGuard(Tensor scale);
  ~LossScaleGuard();
  LossScaleGuard(const LossScaleGuard&) = delete;
  LossScaleGuard& operator=(const LossScaleGuard&) = delete;

 private:
  Tensor previous_;
};

// While alive, every op this thread dispatches reports each input that requires grad to `observe`,
// with grad mode on or off: utils::checkpoint runs its function without grad and finds the
// parameters it reads this way. Guards nest; the innermost one observes.
class GradInputObserverGuard {
 public:
  explicit GradInputObserverGuard(std::function<void(const Tensor&)> observe);
  ~GradInputObserverGuard();
  GradInputObserverGuard(const GradInputObserverGuard&) = delete;
  GradInputObserverGuard& operator=(const GradInputObserverGuard&) = delete;
  // Called by the autograd recorder with each op's inputs.
  void report(const TensorList& inputs) const;

 private:
  std::function<void(const Tensor&)> observe_;
  GradInputObserverGuard* previous_;
};

// Whether this thread is inside backward() or grad(): the ops it dispatches now are gradient
// computations (a Graph's tracer tells them from the forward ops this way).
bool is_running_backward();

}  // namespace flow::autograd
