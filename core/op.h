#pragma once
// The op registry. Every primitive op has one OpDef with fixed slots: schema, meta inference
// (with the argument checks), SBP signatures, vjp and kernels per (device, dtype). The same
// definition serves the eager interpreter, the lazy (Graph) interpreter and autograd.
#include <functional>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "core/global/sbp.h"
#include "core/tensor.h"

namespace flow {

using AttrValue = std::variant<bool, int64_t, double, std::string, std::vector<int64_t>, DType, Device, Scalar>;

// The type of a declared attribute: the AttrValue alternative, in the variant's order.
enum class AttrType : uint8_t { kBool, kInt, kDouble, kString, kInts, kDType, kDevice, kScalar };
const char* attr_type_name(AttrType type);  // "bool", "int", "double", "string", "ints", ...

// One attribute of an op's schema.
struct AttrDef {
  std::string name;
  AttrType type;
};

// Typed attributes of one op call. set() normalises ints to int64_t and floats to double.
class Attrs {
 public:
  Attrs() = default;
  template <typename T>
  Attrs& set(const std::string& name, T value) {
    if constexpr (std::is_same_v<T, bool>) values_[name] = value;
    else if constexpr (std::is_integral_v<T>) values_[name] = static_cast<int64_t>(value);
    else if constexpr (std::is_floating_point_v<T>) values_[name] = static_cast<double>(value);
    else if constexpr (std::is_same_v<T, Shape>) values_[name] = value.vec();
    else if constexpr (std::is_convertible_v<T, std::string> && !std::is_same_v<T, Device>) values_[name] = std::string(value);
    else values_[name] = AttrValue(std::move(value));
    return *this;
  }
  template <typename T>
  const T& get(const std::string& name) const {
    auto it = values_.find(name);
    if (it == values_.end()) fail("attrs", "missing attribute '", name, "'");
    const T* value = std::get_if<T>(&it->second);
    if (value == nullptr) fail("attrs", "attribute '", name, "' has another type");
    return *value;
  }
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  const std::map<std::string, AttrValue>& values() const { return values_; }
  bool operator==(const Attrs& other) const = default;

 private:
  std::map<std::string, AttrValue> values_;
};

std::ostream& operator<<(std::ostream& out, const AttrValue& value);

// What meta inference sees and produces: outputs are always contiguous.
struct TensorMeta {
  Shape shape;
  DType dtype = kFloat32;
  Device device;
};

struct SbpSignature {
  std::vector<Sbp> inputs;
  std::vector<Sbp> outputs;
};

// What a vjp sees. Saved inputs/outputs are unpacked on demand, so only the values a rule
// really uses are checked against later in-place changes; metas are always available.
class VjpContext {
 public:
  VjpContext(const TensorList& grad_outputs_, const Attrs& attrs_, std::vector<bool> needs_input_grad_)
      : grad_outputs(grad_outputs_), attrs(attrs_), needs_input_grad(std::move(needs_input_grad_)) {}
  virtual ~VjpContext() = default;
  virtual Tensor input(size_t i) const = 0;
  virtual Tensor output(size_t i) const = 0;
  virtual const TensorMeta& input_meta(size_t i) const = 0;
  size_t num_inputs() const { return needs_input_grad.size(); }
  // Gradient w.r.t. output i (zeros where that output received none).
  const Tensor& grad(size_t i = 0) const { return grad_outputs[i]; }

  const TensorList& grad_outputs;
  const Attrs& attrs;
  const std::vector<bool> needs_input_grad;
};

struct KernelContext {
  const TensorList& inputs;
  TensorList& outputs;
  const Attrs& attrs;
};

using InferFn = std::function<std::vector<TensorMeta>(const std::vector<TensorMeta>& inputs, const Attrs& attrs)>;
using SbpFn = std::function<std::vector<SbpSignature>(const std::vector<TensorMeta>& inputs, const Attrs& attrs)>;
// Whether a signature of the op's sbp slot holds when its splits cut tensors into `parts`
// pieces; for signatures whose pieces line up only for some counts (a view merging the split
// axis with the next ones).
using SbpHoldsFn = std::function<bool(const std::vector<TensorMeta>& inputs, const Attrs& attrs, const SbpSignature& signature,
                                      int64_t parts)>;
// Returns one gradient per input (undefined for inputs without one), written in functional ops.
using VjpFn = std::function<TensorList(const VjpContext& ctx)>;
using KernelFn = std::function<void(KernelContext& ctx)>;
// Floating-point operations of one call, from the metas alone: what the profiler reports (2 per
// multiply-accumulate for products, one per output element for element-wise ops).
using FlopsFn = std::function<int64_t(const std::vector<TensorMeta>& inputs, const std::vector<TensorMeta>& outputs,
                                      const Attrs& attrs)>;
// What the symbolic profiler (fx/symbolic_profile.h) charges an op beyond its outputs, following
// Colossal-AI's profiler conventions: the inputs and outputs its vjp reads (kept alive from the
// forward to the backward; eager autograd saves exactly these, autograd/node.cpp), the FLOPs of its gradients, and the workspace its forward needs
// besides its outputs (0 for every op flow has: none allocates scratch memory).
struct ProfileCost {
  std::vector<size_t> saved_inputs;
  std::vector<size_t> saved_outputs;
  int64_t backward_flops = 0;
  int64_t temp_bytes = 0;
};
using ProfileCostFn =
    std::function<ProfileCost(const std::vector<TensorMeta>& inputs, const std::vector<TensorMeta>& outputs, const Attrs& attrs)>;
// View ops make their output alias input 0's storage instead of running a kernel.
using ViewFn = std::function<Tensor(const TensorList& inputs, const Attrs& attrs)>;

struct OpDef {
  std::string name;
  std::vector<std::string> input_names;  // with variadic_inputs, the one name repeats
  std::vector<std::string> output_names;
  std::vector<std::string> attr_names;
  std::vector<AttrType> attr_types;  // one per attr_names entry
  bool variadic_inputs = false;
  // Kernels receive contiguous inputs unless the op handles strides itself.
  bool contiguous_inputs = true;
  // Inputs may live on different devices (the device copy op).
  bool mixed_devices = false;
  // In-place ops write their outputs into their first inputs (output i is input i): no output is
  // allocated, and the written storages' versions are bumped.
  bool inplace = false;
  // Draws random numbers: its "seed" and "offset" attrs are reserved from the default generator
  // per call. A Graph reserves fresh ones on every run, and passes never merge or fold it.
  bool random = false;
  // Converts between local and global tensors or between sbps (to_global, to_local): the global
  // dispatch (core/global/global_tensor.cpp) runs it with collectives; it has no kernel.
  bool global_conversion = false;

  // Output metas from input metas: the op's own checks of ranks, dims, dtypes and attribute
  // values. Callers use checked_infer, which checks the schema first.
  InferFn infer;
  SbpFn sbp;
  SbpHoldsFn sbp_holds;  // unset: every signature holds for any number of parts
  VjpFn vjp;
  ViewFn view;
  FlopsFn flops;  // unset: the profiler reports no FLOPs for the op
  ProfileCostFn profile_cost;  // unset: the symbolic profiler charges nothing beyond the outputs
  std::map<std::pair<DeviceType, DType>, KernelFn> kernels;

  // The dtype that selects the kernel: the first input's, or the first output's for sources.
  DType dispatch_dtype(const std::vector<TensorMeta>& inputs, const std::vector<TensorMeta>& outputs) const;
  // The device whose kernel runs the op: the outputs' (inputs' for sinks), or for mixed_devices
  // ops the accelerator among the inputs, since device moves run on its kernel.
  Device kernel_device(const std::vector<TensorMeta>& inputs, const std::vector<TensorMeta>& outputs) const;
  const KernelFn& kernel(DeviceType device, DType dtype) const;
};

// Returns the definition named name, creating an empty one on first use, so that op
// definitions and kernel registrations may run in any static-initialisation order.
OpDef& op_def(const std::string& name);
// The registered op, or flow::Error when no op of that name is defined.
const OpDef& find_op(const std::string& name);
std::vector<std::string> registered_ops();

// Meta inference with every check, for every caller (eager and lazy interpreters, Graph passes,
// oneflow_lite loading a Job): the input count against the schema (at most 2^20 for variadic
// ops whose one input name repeats, such as cat), input metas (non-negative
// dims, sizes int64 can count, one device unless the op moves data), each declared attribute
// present with its declared type, then the op's own infer, then the outputs' sizes and that a
// kernel exists for the resulting dtype and device. Once it returns, the kernel can run on
// tensors of these metas. Errors are flow::Error naming the op.
std::vector<TensorMeta> checked_infer(const OpDef& op, const std::vector<TensorMeta>& inputs, const Attrs& attrs);

// Registers fn as the kernel of op for every dtype listed; used from static initialisers.
struct KernelRegistration {
  KernelRegistration(const std::string& op, DeviceType device, const std::vector<DType>& dtypes, KernelFn fn);
};

// Builder for definitions: FLOW_DEFINE_OP(add) { op.inputs({"a","b"}).outputs({"out"}) ... }
class OpBuilder {
 public:
  explicit OpBuilder(const std::string& name) : def_(op_def(name)) { def_.name = name; }
  OpBuilder& inputs(std::vector<std::string> names, bool variadic = false);
  OpBuilder& outputs(std::vector<std::string> names);
  OpBuilder& attrs(std::vector<AttrDef> attrs);
  OpBuilder& strided_inputs();
  OpBuilder& mixed_devices();
  OpBuilder& inplace();
  OpBuilder& random();
  OpBuilder& global_conversion();
  OpBuilder& infer(InferFn fn);
  OpBuilder& sbp(SbpFn fn);
  OpBuilder& sbp_holds(SbpHoldsFn fn);
  OpBuilder& vjp(VjpFn fn);
  OpBuilder& view(ViewFn fn);
  OpBuilder& flops(FlopsFn fn);
  OpBuilder& profile_cost(ProfileCostFn fn);
  const OpDef& def() const { return def_; }

 private:
  OpDef& def_;
};

namespace sbp {
// Every input and output split on the same axis, for each axis of the output, plus all broadcast.
// A size-1 (broadcast) input dim takes B where the output is split on that axis.
std::vector<SbpSignature> elementwise(const std::vector<TensorMeta>& inputs, const Attrs& attrs);
// elementwise, plus all partial-sum for linear ops (add, sub, scaling): the pieces' results
// still add up to the result.
std::vector<SbpSignature> linear_elementwise(const std::vector<TensorMeta>& inputs, const Attrs& attrs);
}  // namespace sbp

namespace flops {
// One operation per output element, for every element-wise op.
int64_t elementwise(const std::vector<TensorMeta>& inputs, const std::vector<TensorMeta>& outputs, const Attrs& attrs);
}  // namespace flops

// ProfileCost conventions of element-wise ops: one backward FLOP per output element, as Colossal-AI
// counts threshold_backward and friends; they differ in what the vjp reads.
namespace profile {
// Gradients read the inputs (mul, clamp, sin).
ProfileCost elementwise_saving_inputs(const std::vector<TensorMeta>& inputs, const std::vector<TensorMeta>& outputs, const Attrs& attrs);
// Gradients read the output (relu, exp, sigmoid).
ProfileCost elementwise_saving_output(const std::vector<TensorMeta>& inputs, const std::vector<TensorMeta>& outputs, const Attrs& attrs);
// Gradients read nothing forward computed (add, sub, neg).
ProfileCost elementwise_saving_nothing(const std::vector<TensorMeta>& inputs, const std::vector<TensorMeta>& outputs, const Attrs& attrs);
}  // namespace profile

}  // namespace flow

#define FLOW_CONCAT_INNER(a, b) a##b
#define FLOW_CONCAT(a, b) FLOW_CONCAT_INNER(a, b)
// Registers a CPU/CUDA kernel at static-initialisation time.
#define FLOW_REGISTER_KERNEL(op, device, dtypes, fn) \
  static ::flow::KernelRegistration FLOW_CONCAT(flow_kernel_registration_, __COUNTER__)(op, device, dtypes, fn)
