// Host side of fused.cu: decodes a fused program (core/ops/fused.h) into the table the device
// interprets, and registers fused_elementwise, its in-place form and fused_linear (a cuBLAS linear,
// then the program as a second launch) for DeviceType::kCUDA with the CPU kernels' dtypes, so the
// Graph's fusion pass fuses on CUDA where it does on the CPU.
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/kernels/cuda/host.h"
#include "core/op.h"
#include "core/ops/copy.h"
#include "core/ops/fused.h"

namespace flow::cuda {
namespace {

FusedCode code_of(const std::string& op) {
  static const std::map<std::string, FusedCode> codes{
      {"neg", FusedCode::kNeg},           {"abs", FusedCode::kAbs},           {"sign", FusedCode::kSign},
      {"exp", FusedCode::kExp},           {"log", FusedCode::kLog},           {"sqrt", FusedCode::kSqrt},
      {"rsqrt", FusedCode::kRsqrt},       {"sin", FusedCode::kSin},           {"cos", FusedCode::kCos},
      {"tanh", FusedCode::kTanh},         {"sigmoid", FusedCode::kSigmoid},   {"relu", FusedCode::kRelu},
      {"silu", FusedCode::kSilu},         {"gelu", FusedCode::kGelu},         {"clamp", FusedCode::kClamp},
      {"add_scalar", FusedCode::kAddScalar}, {"sub_scalar", FusedCode::kSubScalar}, {"rsub_scalar", FusedCode::kRsubScalar},
      {"mul_scalar", FusedCode::kMulScalar}, {"div_scalar", FusedCode::kDivScalar}, {"rdiv_scalar", FusedCode::kRdivScalar},
      {"pow_scalar", FusedCode::kPowScalar}, {"rpow_scalar", FusedCode::kRpowScalar}, {"add", FusedCode::kAdd},
      {"sub", FusedCode::kSub},           {"mul", FusedCode::kMul},           {"div", FusedCode::kDiv},
      {"pow", FusedCode::kPow},           {"maximum", FusedCode::kMaximum},   {"minimum", FusedCode::kMinimum},
      {"relu_grad", FusedCode::kReluGrad}, {"gelu_grad", FusedCode::kGeluGrad}, {"where", FusedCode::kWhere},
      {"copy", FusedCode::kCopy}};
  auto it = codes.find(op);
  if (it == codes.end()) fail("fused_elementwise", "no CUDA code for op '", op, "'");
  return it->second;
}

bool fits_table(const fused::Program& program, const TensorList& operands) {
  return program.steps.size() <= static_cast<size_t>(kMaxFusedSteps) && operands.size() <= static_cast<size_t>(kMaxFusedOperands) &&
         program.outputs.size() <= static_cast<size_t>(kMaxFusedOutputs);
}

// The device table of `program` over `operands` (contiguous, broadcasting onto the outputs' shape
// as operand_layout allows; inference checked that) writing `outputs`. A missing clamp bound is
// the compute type's lowest / largest finite value, as the CPU kernel's.
FusedProgram table_of(const fused::Program& program, const TensorList& operands, const TensorList& outputs, bool double_compute,
                      const char* op) {
  const double lowest = double_compute ? std::numeric_limits<double>::lowest() : std::numeric_limits<float>::lowest();
  const double largest = double_compute ? std::numeric_limits<double>::max() : std::numeric_limits<float>::max();
  FusedProgram table;
  table.num_steps = static_cast<int>(program.steps.size());
  for (size_t s = 0; s < program.steps.size(); ++s) {
    const fused::Step& step = program.steps[s];
    const Attrs& attrs = step.attrs;
    FusedStep& entry = table.steps[s];
    entry.code = code_of(step.op);
    for (size_t a = 0; a < step.args.size(); ++a) entry.args[a] = static_cast<int16_t>(step.args[a]);
    if (attrs.has("scalar")) entry.scalar = attrs.get<Scalar>("scalar").to_double();
    if (attrs.has("approximate")) entry.tanh_form = attrs.get<std::string>("approximate") == "tanh";
    if (entry.code == FusedCode::kClamp) {
      entry.lo = attrs.get<bool>("has_min") ? attrs.get<Scalar>("min").to_double() : lowest;
      entry.hi = attrs.get<bool>("has_max") ? attrs.get<Scalar>("max").to_double() : largest;
    }
  }
  const Shape& shape = outputs[0].shape();
  table.num_operands = static_cast<int>(operands.size());
  for (size_t k = 0; k < operands.size(); ++k) {
    const fused::OperandLayout layout = *fused::operand_layout(operands[k].shape(), shape);
    table.operands[k] = {operands[k].data_ptr(), scalar_type(operands[k].dtype(), op), layout.inner, layout.size};
  }
  table.num_outputs = static_cast<int>(program.outputs.size());
  for (size_t o = 0; o < program.outputs.size(); ++o) {
    table.outputs[o] = {outputs[o].data_ptr(), scalar_type(outputs[o].dtype(), op), program.outputs[o]};
  }
  return table;
}

// A program beyond the table's capacities (the fusion pass does not bound a group) runs as the
// chain it replaced: each step by its own op's CUDA kernel into a new tensor, then the outputs
// copied, so every operand is read before any output is written. (A bfloat16 fused_linear's
// epilogue then rounds at every step, as its unfused ops would.)
void run_unfused(KernelContext& ctx, const fused::Program& program, const TensorList& operands, DType program_dtype) {
  TensorList values;
  for (const fused::Step& step : program.steps) {
    TensorList args;
    std::vector<TensorMeta> metas;
    for (int arg : step.args) {
      args.push_back(arg >= 0 ? operands[static_cast<size_t>(arg)] : values[static_cast<size_t>(-arg - 1)]);
      metas.push_back({args.back().shape(), args.back().dtype(), args.back().device()});
    }
    if (step.op == "copy") {  // a conversion to the program's dtype, or a rounding to the named one
      const DType dtype = step.attrs.has("dtype") ? dtype_from_name(step.attrs.get<std::string>("dtype")) : program_dtype;
      values.push_back(make_tensor(args[0].shape(), dtype, args[0].device()));
      detail::copy_into(values.back(), args[0]);
      continue;
    }
    const OpDef& op = find_op(step.op);
    const std::vector<TensorMeta> result = checked_infer(op, metas, step.attrs);
    TensorList out{make_tensor(result[0].shape, result[0].dtype, result[0].device)};
    KernelContext step_ctx{args, out, step.attrs};
    op.kernel(DeviceType::kCUDA, op.dispatch_dtype(metas, result))(step_ctx);
    values.push_back(out[0]);
  }
  for (size_t o = 0; o < program.outputs.size(); ++o) detail::copy_into(ctx.outputs[o], values[static_cast<size_t>(program.outputs[o])]);
}

// Runs the program of ctx.attrs over `operands` into ctx.outputs, computing in double for a
// float64 program and in float otherwise (float32, and a bfloat16 fused_linear's epilogue).
void run_program(KernelContext& ctx, const TensorList& operands, DType program_dtype, const char* op) {
  Tensor& first = ctx.outputs[0];
  set_device(first, op);
  const fused::Program program = fused::decode(ctx.attrs.get<std::string>("program"));
  if (!fits_table(program, operands)) return run_unfused(ctx, program, operands, program_dtype);
  const bool double_compute = program_dtype == kFloat64;
  const FusedProgram table = table_of(program, operands, ctx.outputs, double_compute, op);
  check(fused_elementwise(double_compute ? ScalarType::kFloat64 : ScalarType::kFloat32, table, first.numel()), op);
}

// Both forms: the in-place one's destinations (its outputs) lead its inputs.
void fused_kernel(KernelContext& ctx) {
  const auto destinations = static_cast<std::ptrdiff_t>(ctx.attrs.has("destinations") ? ctx.attrs.get<int64_t>("destinations") : 0);
  const TensorList operands(ctx.inputs.begin() + destinations, ctx.inputs.end());
  run_program(ctx, operands, operands[0].dtype(), "fused_elementwise");
}

// The linear writes its product into the first output where that has the product's dtype, and
// the program reads it as operand 0 (each element before any output element is written).
// bfloat16: the product of the widened operands in float32, read by the epilogue in float and
// rounded once into the outputs, as the CPU's bfloat16 kernel computes it.
void fused_linear_kernel(KernelContext& ctx) {
  const auto linear_inputs = static_cast<std::ptrdiff_t>(ctx.attrs.get<int64_t>("linear_inputs"));
  const DType dtype = ctx.inputs[0].dtype(), product_dtype = dtype == kBFloat16 ? kFloat32 : dtype;
  TensorList linear_in(ctx.inputs.begin(), ctx.inputs.begin() + linear_inputs);
  for (Tensor& input : linear_in) {
    if (input.dtype() == product_dtype) continue;
    Tensor wide = make_tensor(input.shape(), product_dtype, input.device());
    detail::copy_into(wide, input);
    input = wide;
  }
  const Tensor& first = ctx.outputs[0];
  TensorList linear_out{first.dtype() == product_dtype ? first : make_tensor(first.shape(), product_dtype, first.device())};
  KernelContext linear_ctx{linear_in, linear_out, ctx.attrs};
  find_op("linear").kernel(DeviceType::kCUDA, product_dtype)(linear_ctx);
  TensorList operands{linear_out[0]};
  operands.insert(operands.end(), ctx.inputs.begin() + linear_inputs, ctx.inputs.end());
  run_program(ctx, operands, dtype, "fused_linear");
}

const std::vector<DType> kFusedDtypes{kFloat32, kFloat64};
FLOW_REGISTER_KERNEL("fused_elementwise", DeviceType::kCUDA, kFusedDtypes, fused_kernel);
FLOW_REGISTER_KERNEL("fused_elementwise_inplace", DeviceType::kCUDA, kFusedDtypes, fused_kernel);
FLOW_REGISTER_KERNEL("fused_linear", DeviceType::kCUDA, (std::vector<DType>{kFloat32, kFloat64, kBFloat16}), fused_linear_kernel);

}  // namespace
}  // namespace flow::cuda
