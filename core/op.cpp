#include "core/op.h"

#include <glog/logging.h>

#include <algorithm>
#include <mutex>
#include <sstream>

#include "core/allocator.h"
#include "core/kernels/cpu/reduced_float.h"

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

const char* attr_type_name(AttrType type) {
  switch (type) {
    case AttrType::kBool: return "bool";
    case AttrType::kInt: return "int";
    case AttrType::kDouble: return "double";
    case AttrType::kString: return "string";
    case AttrType::kInts: return "ints";
    case AttrType::kDType: return "dtype";
    case AttrType::kDevice: return "device";
    case AttrType::kScalar: return "scalar";
  }
  return "?";
}

DType OpDef::dispatch_dtype(const std::vector<TensorMeta>& inputs, const std::vector<TensorMeta>& outputs) const {
  if (!inputs.empty()) return inputs[0].dtype;
  CHECK(!outputs.empty()) << name << " has neither inputs nor outputs";
  return outputs[0].dtype;
}

Device OpDef::kernel_device(const std::vector<TensorMeta>& inputs, const std::vector<TensorMeta>& outputs) const {
  Device device = outputs.empty() ? inputs.at(0).device : outputs[0].device;
  if (mixed_devices) {
    for (const auto& meta : inputs) {
      if (!meta.device.is_cpu() && !device.is_meta()) device = meta.device;
    }
  }
  return device;
}

const KernelFn& OpDef::kernel(DeviceType device, DType dtype) const {
  auto it = kernels.find({device, dtype});
  if (it == kernels.end()) {
    fail(name, "no ", device_type_name(device), " kernel for dtype ", dtype_name(dtype));
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

namespace {
// Variadic ops whose one input name repeats (cat, fused programs) take at most this many inputs.
constexpr size_t kMaxVariadicInputs = size_t{1} << 20;

// Dims must be non-negative and the byte size countable: a meta read from a file may be anything.
// Kernels multiply subsets of the dims (rows, planes), so even an empty tensor's non-zero dims
// must have a product int64 can hold.
void check_meta(const OpDef& op, const TensorMeta& meta, const char* role, size_t index) {
  int64_t product = 1;
  for (int64_t d : meta.shape) {
    if (d < 0) fail(op.name, role, " ", index, " has a negative dimension in shape ", meta.shape);
    if (d > 0 && __builtin_mul_overflow(product, d, &product)) {
      fail(op.name, role, " ", index, " shape ", meta.shape, " has dims whose product overflows int64");
    }
  }
  meta.shape.nbytes(itemsize(meta.dtype), op.name.c_str());
}

void check_attrs(const OpDef& op, const Attrs& attrs) {
  for (size_t i = 0; i < op.attr_names.size(); ++i) {
    const std::string& name = op.attr_names[i];
    auto it = attrs.values().find(name);
    if (it == attrs.values().end()) fail(op.name, "missing attribute '", name, "'");
    if (it->second.index() != static_cast<size_t>(op.attr_types[i])) {
      fail(op.name, "attribute '", name, "' must be of type ", attr_type_name(op.attr_types[i]), ", got ",
           attr_type_name(static_cast<AttrType>(it->second.index())));
    }
  }
}
}  // namespace

std::vector<TensorMeta> checked_infer(const OpDef& op, const std::vector<TensorMeta>& inputs, const Attrs& attrs) {
  CHECK(op.infer) << "op '" << op.name << "' is used but has no definition";
  const size_t declared = op.input_names.size();
  if (!op.variadic_inputs && inputs.size() != declared) fail(op.name, "expected ", declared, " inputs, got ", inputs.size());
  // Variadic ops either repeat their one input name or end in optional inputs.
  const size_t most = declared == 1 ? kMaxVariadicInputs : declared;
  if (op.variadic_inputs && (inputs.empty() || inputs.size() > most)) {
    fail(op.name, "expected 1 to ", most, " inputs, got ", inputs.size());
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_meta(op, inputs[i], "input", i);
    if (!op.mixed_devices && inputs[i].device != inputs[0].device) {
      fail(op.name, "expected all tensors on the same device, got ", inputs[0].device, " and ", inputs[i].device);
    }
  }
  check_attrs(op, attrs);
  std::vector<TensorMeta> outputs = op.infer(inputs, attrs);
  CHECK(!outputs.empty() || op.output_names.empty()) << op.name << " inferred no outputs";
  for (size_t i = 0; i < outputs.size(); ++i) {
    check_meta(op, outputs[i], "output", i);
    // An in-place op's output i is its input i itself.
    if (op.inplace && (i >= inputs.size() || !(outputs[i].shape == inputs[i].shape) || outputs[i].dtype != inputs[i].dtype ||
                       outputs[i].device != inputs[i].device)) {
      fail(op.name, "writes output ", i, " ", outputs[i].shape, " in place, but input ", i, " cannot hold it");
    }
  }
  if (!op.view && !op.global_conversion) {
    const Device device = op.kernel_device(inputs, outputs);
    backend_for(device, op.name.c_str());
    if (!device.is_meta()) op.kernel(device.type, op.dispatch_dtype(inputs, outputs));
  }
  return outputs;
}

KernelRegistration::KernelRegistration(const std::string& op, DeviceType device, const std::vector<DType>& dtypes,
                                       KernelFn fn) {
  OpDef& def = op_def(op);
  for (DType dtype : dtypes) def.kernels[{device, dtype}] = fn;
  // 16-bit floats on the CPU compute in float32 unless the op registers kernels of its own for
  // them (registered in any order: an explicit registration replaces this one).
  const bool registers_float32 = std::find(dtypes.begin(), dtypes.end(), kFloat32) != dtypes.end();
  if (device == DeviceType::kCPU && registers_float32) {
    for (DType reduced : {kBFloat16, kFloat16}) def.kernels.try_emplace({device, reduced}, cpu::computed_in_float32(fn));
  }
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
OpBuilder& OpBuilder::attrs(std::vector<AttrDef> attrs) {
  def_.attr_names.clear();
  def_.attr_types.clear();
  for (auto& attr : attrs) {
    def_.attr_names.push_back(std::move(attr.name));
    def_.attr_types.push_back(attr.type);
  }
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

OpBuilder& OpBuilder::global_conversion() {
  def_.global_conversion = true;
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
OpBuilder& OpBuilder::sbp_holds(SbpHoldsFn fn) {
  def_.sbp_holds = std::move(fn);
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
OpBuilder& OpBuilder::flops(FlopsFn fn) {
  def_.flops = std::move(fn);
  return *this;
}
OpBuilder& OpBuilder::profile_cost(ProfileCostFn fn) {
  def_.profile_cost = std::move(fn);
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

std::vector<SbpSignature> linear_elementwise(const std::vector<TensorMeta>& inputs, const Attrs& attrs) {
  std::vector<SbpSignature> signatures = elementwise(inputs, attrs);
  signatures.push_back({std::vector<Sbp>(inputs.size(), Sbp::partial_sum()), {Sbp::partial_sum()}});
  return signatures;
}
}  // namespace sbp

namespace flops {
int64_t elementwise(const std::vector<TensorMeta>&, const std::vector<TensorMeta>& outputs, const Attrs&) {
  int64_t total = 0;
  for (const auto& meta : outputs) total += meta.shape.numel();
  return total;
}
}  // namespace flops

namespace profile {
ProfileCost elementwise_saving_inputs(const std::vector<TensorMeta>& inputs, const std::vector<TensorMeta>& outputs, const Attrs& attrs) {
  ProfileCost cost = elementwise_saving_nothing(inputs, outputs, attrs);
  for (size_t i = 0; i < inputs.size(); ++i) cost.saved_inputs.push_back(i);
  return cost;
}
ProfileCost elementwise_saving_output(const std::vector<TensorMeta>& inputs, const std::vector<TensorMeta>& outputs, const Attrs& attrs) {
  ProfileCost cost = elementwise_saving_nothing(inputs, outputs, attrs);
  cost.saved_outputs.push_back(0);
  return cost;
}
ProfileCost elementwise_saving_nothing(const std::vector<TensorMeta>& inputs, const std::vector<TensorMeta>& outputs, const Attrs& attrs) {
  ProfileCost cost;
  cost.backward_flops = flops::elementwise(inputs, outputs, attrs);
  return cost;
}
}  // namespace profile

}  // namespace flow
