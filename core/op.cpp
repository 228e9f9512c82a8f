#include "core/op.h"

#include <glog/logging.h>

#include <mutex>
#include <sstream>

namespace flow {
namespace {
std::map<std::string, OpDef>& registry() {
  static auto* ops = new std::map<std::string, OpDef>();  // leaked: used by static destructors
  return *ops;
}
std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}
}  // namespace

std::ostream& operator<<(std::ostream& out, const AttrValue& value) {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          out << Shape(v.begin(), v.end());
        } else if constexpr (std::is_same_v<T, bool>) {
          out << (v ? "true" : "false");
        } else {
          out << v;
        }
      },
      value);
  return out;
}

std::string Sbp::str() const {
  switch (kind) {
    case Kind::kSplit: return "S(" + std::to_string(axis) + ")";
    case Kind::kBroadcast: return "B";
    case Kind::kPartialSum: return "P";
  }
  return "?";
}

DType OpDef::dispatch_dtype(const std::vector<TensorMeta>& inputs, const std::vector<TensorMeta>& outputs) const {
  if (!inputs.empty()) return inputs[0].dtype;
  CHECK(!outputs.empty()) << name << " has neither inputs nor outputs";
  return outputs[0].dtype;
}

const KernelFn& OpDef::kernel(DeviceType device, DType dtype) const {
  auto it = kernels.find({device, dtype});
  if (it == kernels.end()) {
    fail(name, "no ", device == DeviceType::kCPU ? "cpu" : "cuda", " kernel for dtype ", dtype_name(dtype));
  }
  return it->second;
}

OpDef& op_def(const std::string& name) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  OpDef& def = registry()[name];
  def.name = name;
  return def;
}

const OpDef& find_op(const std::string& name) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = registry().find(name);
  if (it == registry().end() || !it->second.infer) fail("op", "no op named '", name, "' is registered");
  return it->second;
}

std::vector<std::string> registered_ops() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<std::string> names;
  for (const auto& [name, def] : registry()) {
    if (def.infer) names.push_back(name);
  }
  return names;
}

KernelRegistration::KernelRegistration(const std::string& op, DeviceType device, const std::vector<DType>& dtypes,
                                       KernelFn fn) {
  OpDef& def = op_def(op);
  for (DType dtype : dtypes) def.kernels[{device, dtype}] = fn;
}

OpBuilder& OpBuilder::inputs(std::vector<std::string> names, bool variadic) {
  def_.input_names = std::move(names);
  def_.variadic_inputs = variadic;
  return *this;
}
OpBuilder& OpBuilder::outputs(std::vector<std::string> names) {
  def_.output_names = std::move(names);
  return *this;
}
OpBuilder& OpBuilder::attrs(std::vector<std::string> names) {
  def_.attr_names = std::move(names);
  return *this;
}
OpBuilder& OpBuilder::strided_inputs() {
  def_.contiguous_inputs = false;
  return *this;
}
OpBuilder& OpBuilder::mixed_devices() {
  def_.mixed_devices = true;
  return *this;
}
OpBuilder& OpBuilder::random() {
  def_.random = true;
  return *this;
}

OpBuilder& OpBuilder::inplace() {
  def_.inplace = true;
  return *this;
}
OpBuilder& OpBuilder::infer(InferFn fn) {
  def_.infer = std::move(fn);
  return *this;
}
OpBuilder& OpBuilder::sbp(SbpFn fn) {
  def_.sbp = std::move(fn);
  return *this;
}
OpBuilder& OpBuilder::vjp(VjpFn fn) {
  def_.vjp = std::move(fn);
  return *this;
}
OpBuilder& OpBuilder::view(ViewFn fn) {
  def_.view = std::move(fn);
  return *this;
}

namespace sbp {
std::vector<SbpSignature> elementwise(const std::vector<TensorMeta>& inputs, const Attrs&) {
  Shape out_shape;
  for (const auto& meta : inputs) out_shape = broadcast_shapes(out_shape, meta.shape, "sbp");
  std::vector<SbpSignature> signatures;
  for (int64_t axis = 0; axis < out_shape.ndim(); ++axis) {
    SbpSignature signature;
    for (const auto& meta : inputs) {
      const int64_t input_axis = axis - (out_shape.ndim() - meta.shape.ndim());
      const bool broadcast = input_axis < 0 || (meta.shape[input_axis] == 1 && out_shape[axis] != 1);
      signature.inputs.push_back(broadcast ? Sbp::broadcast() : Sbp::split(input_axis));
    }
    signature.outputs.push_back(Sbp::split(axis));
    signatures.push_back(std::move(signature));
  }
  signatures.push_back({std::vector<Sbp>(inputs.size(), Sbp::broadcast()), {Sbp::broadcast()}});
  return signatures;
}
}  // namespace sbp

}  // namespace flow
