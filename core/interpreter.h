#pragma once
// The one dispatch point: functional ops hand (op, inputs, attrs) to flow::apply, which sends an
// op on local tensors to the current interpreter's apply and an op with a global input (or a
// global conversion) to its apply_global, the SPMD dispatch of core/global. Eager runs kernels
// now; the lazy interpreter (pushed by graph/ while tracing build()) records nodes instead.
#include <memory>

#include "core/op.h"

namespace flow {

class Interpreter {
 public:
  virtual ~Interpreter() = default;
  // An op on local tensors.
  virtual TensorList apply(const OpDef& op, const TensorList& inputs, const Attrs& attrs) = 0;
  // An op on global tensors: distributed::dispatch_global (core/global/dispatch.h), which boxes
  // the inputs and hands the op on this rank's pieces back to apply().
  virtual TensorList apply_global(const OpDef& op, const TensorList& inputs, const Attrs& attrs);
};

// Autograd installs a recorder; the eager and lazy interpreters call it after each op so that
// a backward node is made when an input requires grad.
class AutogradRecorder {
 public:
  virtual ~AutogradRecorder() = default;
  virtual void record(const OpDef& op, const TensorList& inputs, const TensorList& outputs, const Attrs& attrs) = 0;
};
void set_autograd_recorder(AutogradRecorder* recorder);
// Hands an op that ran (or was traced) to the installed recorder, if any.
void record_for_autograd(const OpDef& op, const TensorList& inputs, const TensorList& outputs, const Attrs& attrs);

// The interpreter of the calling thread: eager unless an InterpreterGuard pushed another.
Interpreter& current_interpreter();
class InterpreterGuard {
 public:
  explicit InterpreterGuard(Interpreter* interpreter);
  ~InterpreterGuard();
  InterpreterGuard(const InterpreterGuard&) = delete;
  InterpreterGuard& operator=(const InterpreterGuard&) = delete;

 private:
  Interpreter* previous_;
};

// Runs op through the current interpreter (autocast first, when enabled).
TensorList apply(const OpDef& op, const TensorList& inputs, const Attrs& attrs = {});
Tensor apply_one(const OpDef& op, const TensorList& inputs, const Attrs& attrs = {});

// Shared by interpreters: checked_infer on the inputs' metas (inputs must be defined).
std::vector<TensorMeta> check_and_infer(const OpDef& op, const TensorList& inputs, const Attrs& attrs);

// Runs op's kernel (or view function) on inputs whose metas were checked, without recording
// autograd. Outputs are allocated unless `outputs` brings preallocated contiguous tensors of the
// inferred metas (a Graph's memory plan); in-place ops write into their inputs.
TensorList execute_op(const OpDef& op, const TensorList& inputs, const Attrs& attrs, const std::vector<TensorMeta>& out_metas,
                      TensorList outputs = {});

class EagerInterpreter final : public Interpreter {
 public:
  TensorList apply(const OpDef& op, const TensorList& inputs, const Attrs& attrs) override;
};

}  // namespace flow
