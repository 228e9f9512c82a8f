#include "core/interpreter.h"

#include <glog/logging.h>

#include "core/autocast.h"
#include "core/global/dispatch.h"
#include "core/ops/copy.h"
#include "core/profiler.h"

namespace flow {
namespace {
AutogradRecorder* g_recorder = nullptr;

Interpreter*& thread_interpreter() {
  thread_local Interpreter* current = nullptr;
  return current;
}

EagerInterpreter& eager() {
  static EagerInterpreter interpreter;
  return interpreter;
}

TensorMeta meta_of(const Tensor& t) { return {t.shape(), t.dtype(), t.device()}; }
}  // namespace

void set_autograd_recorder(AutogradRecorder* recorder) { g_recorder = recorder; }
void record_for_autograd(const OpDef& op, const TensorList& inputs, const TensorList& outputs, const Attrs& attrs) {
  if (g_recorder != nullptr) g_recorder->record(op, inputs, outputs, attrs);
}

Interpreter& current_interpreter() {
  Interpreter* current = thread_interpreter();
  return current ? *current : eager();
}

InterpreterGuard::InterpreterGuard(Interpreter* interpreter) : previous_(thread_interpreter()) {
  thread_interpreter() = interpreter;
}
InterpreterGuard::~InterpreterGuard() { thread_interpreter() = previous_; }

std::vector<TensorMeta> check_and_infer(const OpDef& op, const TensorList& inputs, const Attrs& attrs) {
  std::vector<TensorMeta> metas;
  metas.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) fail(op.name, "input ", i, " is an undefined tensor");
    metas.push_back(meta_of(inputs[i]));
  }
  return checked_infer(op, metas, attrs);
}

TensorList Interpreter::apply_global(const OpDef& op, const TensorList& inputs, const Attrs& attrs) {
  return distributed::dispatch_global(op, inputs, attrs);
}

TensorList apply(const OpDef& op, const TensorList& inputs, const Attrs& attrs) {
  std::optional<AutocastCall> cast;
  if (is_autocast_enabled()) cast = autocast_call(op, inputs, attrs);
  const TensorList& actual = cast ? cast->inputs : inputs;
  const Attrs& actual_attrs = cast ? cast->attrs : attrs;
  Interpreter& interpreter = current_interpreter();
  if (op.global_conversion || distributed::any_global(actual)) return interpreter.apply_global(op, actual, actual_attrs);
  return interpreter.apply(op, actual, actual_attrs);
}

Tensor apply_one(const OpDef& op, const TensorList& inputs, const Attrs& attrs) {
  TensorList outputs = apply(op, inputs, attrs);
  CHECK_EQ(outputs.size(), 1u) << op.name;
  return std::move(outputs[0]);
}

TensorList execute_op(const OpDef& op, const TensorList& inputs, const Attrs& attrs, const std::vector<TensorMeta>& out_metas,
                      TensorList outputs) {
  if (op.global_conversion) fail(op.name, "converts global tensors and has no kernel to run on local ones");
  if (op.view) {
    CHECK_EQ(out_metas.size(), 1u);
    return {op.view(inputs, attrs)};
  }
  if (op.inplace) {
    outputs.clear();
    for (size_t i = 0; i < out_metas.size(); ++i) {
      if (!inputs[i].is_contiguous()) {
        fail(op.name, "writes in place and needs contiguous tensors, but input ", i, " ", inputs[i].shape(), " has strides ",
             Shape(inputs[i].strides()));
      }
      outputs.push_back(inputs[i]);
    }
  } else if (outputs.empty()) {
    outputs.reserve(out_metas.size());
    for (const auto& meta : out_metas) outputs.push_back(make_tensor(meta.shape, meta.dtype, meta.device));
  }
  CHECK_EQ(outputs.size(), out_metas.size()) << op.name;
  std::vector<TensorMeta> in_metas;
  in_metas.reserve(inputs.size());
  for (const auto& t : inputs) in_metas.push_back(meta_of(t));
  const Device device = op.kernel_device(in_metas, out_metas);
  // Meta tensors have no data: the outputs' metas are all there is to compute.
  if (device.is_meta()) return outputs;
  const KernelFn& kernel = op.kernel(device.type, op.dispatch_dtype(in_metas, out_metas));
  if (op.contiguous_inputs) {
    TensorList prepared;
    prepared.reserve(inputs.size());
    for (const auto& t : inputs) prepared.push_back(t.is_contiguous() ? t : detail::contiguous_copy(t));
    KernelContext ctx{prepared, outputs, attrs};
    kernel(ctx);
  } else {
    KernelContext ctx{inputs, outputs, attrs};
    kernel(ctx);
  }
  if (op.inplace) {
    for (auto& out : outputs) out.storage()->bump_version();
  }
  return outputs;
}

TensorList EagerInterpreter::apply(const OpDef& op, const TensorList& inputs, const Attrs& attrs) {
  // The profiler's whole cost when no profile records: this one relaxed load.
  const bool profiling = profiler::is_recording();
  const profiler::Clock::time_point start = profiling ? profiler::Clock::now() : profiler::Clock::time_point();
  TensorList outputs = execute_op(op, inputs, attrs, check_and_infer(op, inputs, attrs));
  if (profiling) profiler::record_op(op, inputs, outputs, attrs, "op", start);
  record_for_autograd(op, inputs, outputs, attrs);
  return outputs;
}

}  // namespace flow
