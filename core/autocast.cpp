#include "core/autocast.h"

#include <algorithm>
#include <iterator>
#include <set>
#include <string>

#include "core/ops/copy.h"

namespace flow {
namespace {

DType default_dtype(DeviceType device_type) { return device_type == DeviceType::kCUDA ? kFloat16 : kBFloat16; }

thread_local AutocastState t_states[autocast::kDeviceTypes] = {{false, kBFloat16}, {false, kFloat16}};

// Meta tensors (a model planned without memory) follow the CPU's policy.
AutocastState& state_of(DeviceType device_type) {
  return t_states[static_cast<size_t>(device_type == DeviceType::kMeta ? DeviceType::kCPU : device_type)];
}

// Products whose multiply-adds gain most from 16-bit operands (PyTorch's lower-precision list).
const std::set<std::string>& lower_precision_ops() {
  static const std::set<std::string> ops{"matmul", "linear", "fused_linear", "conv2d", "conv2d_grad_input", "flash_attention"};
  return ops;
}

// Ops whose range or long accumulations 16-bit floats would spoil (PyTorch's float32 list).
const std::set<std::string>& float32_ops() {
  static const std::set<std::string> ops{"exp",       "log",          "pow",        "pow_scalar",      "rpow_scalar",
                                         "rsqrt",     "softmax",      "log_softmax", "reduce_sum",     "reduce_prod",
                                         "layer_norm", "batch_norm_train", "batch_norm_eval"};
  return ops;
}

// float32 ops whose CPU kernels read a 16-bit first input themselves and write float32 (their
// "dtype" attribute): the same values as on a widened copy of the input, without making that copy.
const std::set<std::string>& widening_ops() {
  static const std::set<std::string> ops{"softmax", "log_softmax", "sparse_softmax_cross_entropy"};
  return ops;
}

bool is_castable(const Tensor& t) { return t.defined() && is_floating(t.dtype()) && t.dtype() != kFloat64; }

}  // namespace

autocast::autocast(const Device& device_type, bool enabled) : autocast(device_type, default_dtype(device_type.type), enabled) {}

autocast::autocast(const Device& device_type, DType dtype, bool enabled) {
  check_autocast_dtype("autocast", dtype);
  std::copy(std::begin(t_states), std::end(t_states), previous_);
  AutocastState& state = state_of(device_type.type);
  state.enabled = enabled;
  if (enabled) state.dtype = dtype;
}

autocast::autocast(DType dtype, bool enabled) {
  check_autocast_dtype("autocast", dtype);
  std::copy(std::begin(t_states), std::end(t_states), previous_);
  for (AutocastState& state : t_states) {
    state.enabled = enabled;
    if (enabled) state.dtype = dtype;
  }
}

autocast::~autocast() { std::copy(std::begin(previous_), std::end(previous_), t_states); }

void check_autocast_dtype(const char* op, DType dtype) {
  if (!is_reduced_floating(dtype)) fail(op, "dtype must be bfloat16 or float16, got ", dtype_name(dtype));
}

bool is_autocast_enabled() {
  return std::any_of(std::begin(t_states), std::end(t_states), [](const AutocastState& state) { return state.enabled; });
}
bool is_autocast_enabled(const Device& device_type) { return state_of(device_type.type).enabled; }
DType autocast_dtype(const Device& device_type) { return state_of(device_type.type).dtype; }

std::optional<AutocastCall> autocast_call(const OpDef& op, const TensorList& inputs, const Attrs& attrs) {
  const auto first = std::find_if(inputs.begin(), inputs.end(), is_castable);
  if (first == inputs.end()) return std::nullopt;
  const AutocastState& state = state_of(first->device().type);
  if (!state.enabled) return std::nullopt;
  if (widening_ops().count(op.name) != 0 && first == inputs.begin() && is_reduced_floating(first->dtype()) && !first->device().is_cuda()) {
    return AutocastCall{inputs, Attrs(attrs).set("dtype", kFloat32)};
  }
  DType target;
  if (lower_precision_ops().count(op.name) != 0) {
    target = state.dtype;
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
  return AutocastCall{std::move(cast), attrs};
}

}  // namespace flow
