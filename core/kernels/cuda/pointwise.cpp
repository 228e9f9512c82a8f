// Host side of pointwise.cu: prepares the strided geometry of each element-wise op, reads its
// attributes and registers the kernels for DeviceType::kCUDA with the CPU kernels' dtypes.
#include <string>
#include <vector>

#include "core/kernels/cuda/host.h"
#include "core/op.h"

namespace flow::cuda {
namespace {

ScalarArg scalar_arg(const Scalar& s) { return ScalarArg{s.to_double(), s.to_int()}; }

// Runs launch(type, geometry, numel, out, inputs...) over the op's strided operands.
template <typename Launch>
void elementwise(KernelContext& ctx, const char* op, Launch launch) {
  Tensor& out = ctx.outputs[0];
  set_device(out, op);
  std::vector<const Tensor*> inputs;
  for (const Tensor& t : ctx.inputs) inputs.push_back(&t);
  const Prepared p = prepare(out, inputs, op);
  check(launch(scalar_type(ctx.inputs[0].dtype(), op), p.geometry, out.numel(), p.operands), op);
}

void sign_kernel(KernelContext& ctx) {
  elementwise(ctx, "sign", [](ScalarType type, const Geometry& g, int64_t numel, const std::vector<Operand>& o) {
    return sign(type, g, numel, o[0], o[1]);
  });
}

void softplus_kernel(KernelContext& ctx) {
  const double beta = ctx.attrs.get<double>("beta"), threshold = ctx.attrs.get<double>("threshold");
  elementwise(ctx, "softplus", [&](ScalarType type, const Geometry& g, int64_t numel, const std::vector<Operand>& o) {
    return softplus(type, g, numel, o[0], o[1], beta, threshold);
  });
}

void clamp_kernel(KernelContext& ctx) {
  const bool has_min = ctx.attrs.get<bool>("has_min"), has_max = ctx.attrs.get<bool>("has_max");
  const ScalarArg min = has_min ? scalar_arg(ctx.attrs.get<Scalar>("min")) : ScalarArg{};
  const ScalarArg max = has_max ? scalar_arg(ctx.attrs.get<Scalar>("max")) : ScalarArg{};
  elementwise(ctx, "clamp", [&](ScalarType type, const Geometry& g, int64_t numel, const std::vector<Operand>& o) {
    return clamp(type, g, numel, o[0], o[1], has_min, min, has_max, max);
  });
}

// inputs: grad, input.
void gelu_grad_kernel(KernelContext& ctx) {
  const bool tanh_form = ctx.attrs.get<std::string>("approximate") == "tanh";
  elementwise(ctx, "gelu_grad", [&](ScalarType type, const Geometry& g, int64_t numel, const std::vector<Operand>& o) {
    return gelu_grad(type, tanh_form, g, numel, o[0], o[1], o[2]);
  });
}

KernelFn logical_kernel(LogicalOp op, const char* name) {
  return [op, name](KernelContext& ctx) {
    elementwise(ctx, name, [op](ScalarType, const Geometry& g, int64_t numel, const std::vector<Operand>& o) {
      return logical(op, g, numel, o[0], o[1], o[2]);
    });
  };
}

void logical_not_kernel(KernelContext& ctx) {
  elementwise(ctx, "logical_not", [](ScalarType type, const Geometry& g, int64_t numel, const std::vector<Operand>& o) {
    return logical_not(type, g, numel, o[0], o[1]);
  });
}

// inputs: input, mask (bool, broadcast to the input).
void masked_fill_kernel(KernelContext& ctx) {
  const ScalarArg value = scalar_arg(ctx.attrs.get<Scalar>("value"));
  elementwise(ctx, "masked_fill", [&](ScalarType type, const Geometry& g, int64_t numel, const std::vector<Operand>& o) {
    return masked_fill(type, g, numel, o[0], o[1], o[2], value);
  });
}

// inputs: input, target (contiguous, one shape). The CPU checks the range before computing; here
// the check rides along and is read back after the launch (a synchronising copy).
void binary_cross_entropy_kernel(KernelContext& ctx) {
  const char* op = "binary_cross_entropy";
  Tensor& out = ctx.outputs[0];
  set_device(out, op);
  const Tensor error = error_cell(out, op);
  check(binary_cross_entropy(scalar_type(out.dtype(), op), out.numel(), ctx.inputs[0].data_ptr(), ctx.inputs[1].data_ptr(), out.data_ptr(),
                             static_cast<int64_t*>(error.data_ptr())),
        op);
  if (recorded_error(error, op)) fail(op, "all elements of input should be between 0 and 1");
}

const std::vector<DType> kNumeric = {kFloat32, kFloat64, kInt64, kInt32, kUInt8, kInt8};
const std::vector<DType> kAllDtypes = and_reduced(kCudaDtypes);

FLOW_REGISTER_KERNEL("sign", DeviceType::kCUDA, kNumeric, sign_kernel);
FLOW_REGISTER_KERNEL("softplus", DeviceType::kCUDA, floating_dtypes(), softplus_kernel);
FLOW_REGISTER_KERNEL("clamp", DeviceType::kCUDA, kNumeric, clamp_kernel);
// float16 too (the CPU has bfloat16 only): CUDA's gelu takes both, and its backward runs this.
FLOW_REGISTER_KERNEL("gelu_grad", DeviceType::kCUDA, and_reduced(floating_dtypes()), gelu_grad_kernel);
FLOW_REGISTER_KERNEL("logical_and", DeviceType::kCUDA, {kBool}, logical_kernel(LogicalOp::kAnd, "logical_and"));
FLOW_REGISTER_KERNEL("logical_or", DeviceType::kCUDA, {kBool}, logical_kernel(LogicalOp::kOr, "logical_or"));
FLOW_REGISTER_KERNEL("logical_xor", DeviceType::kCUDA, {kBool}, logical_kernel(LogicalOp::kXor, "logical_xor"));
FLOW_REGISTER_KERNEL("logical_not", DeviceType::kCUDA, kAllDtypes, logical_not_kernel);
FLOW_REGISTER_KERNEL("masked_fill", DeviceType::kCUDA, kAllDtypes, masked_fill_kernel);
FLOW_REGISTER_KERNEL("binary_cross_entropy", DeviceType::kCUDA, and_reduced(floating_dtypes()), binary_cross_entropy_kernel);

}  // namespace
}  // namespace flow::cuda
