#include "core/autocast.h"

#include <set>
#include <string>

#include "core/ops/copy.h"

namespace flow {
namespace {

thread_local bool t_enabled = false;
thread_local DType t_dtype = kBFloat16;

// Products whose multiply-adds gain most from 16-bit operands (PyTorch's lower-precision list).
const std::set<std::string>& lower_precision_ops() {
  static const std::set<std::string> ops{"matmul", "linear", "fused_linear", "conv2d", "conv2d_grad_input"};
  return ops;
}

// Ops whose range or long accumulations 16-bit floats would spoil (PyTorch's float32 list).
const std::set<std::string>& float32_ops() {
  static const std::set<std::string> ops{"exp",       "log",          "pow",        "pow_scalar",      "rpow_scalar",
                                         "rsqrt",     "softmax",      "log_softmax", "reduce_sum",     "reduce_prod",
                                         "layer_norm", "batch_norm_train", "batch_norm_eval"};
  return ops;
}

bool is_castable(const Tensor& t) { return t.defined() && is_floating(t.dtype()) && t.dtype() != kFloat64; }

}  // namespace

autocast::autocast(DType dtype, bool enabled) : previous_enabled_(t_enabled), previous_dtype_(t_dtype) {
  check_autocast_dtype("autocast", dtype);
  t_enabled = enabled;
  if (enabled) t_dtype = dtype;
}

autocast::~autocast() {
  t_enabled = previous_enabled_;
  t_dtype = previous_dtype_;
}

void check_autocast_dtype(const char* op, DType dtype) {
  if (!is_reduced_floating(dtype)) fail(op, "dtype must be bfloat16 or float16, got ", dtype_name(dtype));
}

bool is_autocast_enabled() { return t_enabled; }
DType autocast_dtype() { return t_dtype; }

std::optional<TensorList> autocast_inputs(const OpDef& op, const TensorList& inputs) {
  if (!t_enabled) return std::nullopt;
  DType target;
  if (lower_precision_ops().count(op.name) != 0) {
    target = t_dtype;
  } else if (float32_ops().count(op.name) != 0) {
    target = kFloat32;
  } else {
    return std::nullopt;
  }
  bool changed = false;
  TensorList cast = inputs;
  for (Tensor& t : cast) {
    if (!is_castable(t) || t.dtype() == target) continue;
    t = to(t, target);
    changed = true;
  }
  if (!changed) return std::nullopt;
  return cast;
}

}  // namespace flow
