// CPU kernel of fused_elementwise: the output is cut into tiles of kTile elements; for each tile
// every step runs as its own tight (vectorisable) loop over tile buffers that stay in L1, and
// only the program's outputs are written to memory. The loops are in fused_tiles.inc.
#include <glog/logging.h>

#include <algorithm>
#include <map>
#include <memory>

#include "core/kernels/cpu/convert.h"
#include "core/kernels/cpu/dnnl_util.h"
#include "core/kernels/cpu/elementwise_math.h"
#include "core/kernels/cpu/kernel_caches.h"
#include "core/kernels/cpu/loop.h"
#include "core/kernels/cpu/matmul.h"
#include "core/kernels/cpu/reduced_float.h"
#include "core/lru_cache.h"
#include "core/op.h"
#include "core/ops/fused.h"
#include "core/thread_pool.h"

namespace flow::cpu {
namespace {

// A few tiles of 1024 floats fit L1 with the program's steps; 512 spent more on the per-tile loop
// over operands and steps (the AMP MLP's 784x512 SGD update: 108 us per step at 512, 88 at 1024 and
// 2048, 122 at 4096, 2 threads, AVX-512).
constexpr int64_t kTile = 1024;

enum class Code {
  kNeg, kAbs, kSign, kExp, kLog, kSqrt, kRsqrt, kSin, kCos, kTanh, kSigmoid, kRelu, kSilu, kGelu, kClamp,
  kAddScalar, kSubScalar, kRsubScalar, kMulScalar, kDivScalar, kRdivScalar, kPowScalar, kRpowScalar,
  kAdd, kSub, kMul, kDiv, kPow, kMaximum, kMinimum, kReluGrad, kGeluGrad, kWhere, kCopy,
};

Code code_of(const std::string& op) {
  static const std::map<std::string, Code> codes{
      {"neg", Code::kNeg},           {"abs", Code::kAbs},
      {"sign", Code::kSign},         {"exp", Code::kExp},
      {"log", Code::kLog},           {"sqrt", Code::kSqrt},
      {"rsqrt", Code::kRsqrt},       {"sin", Code::kSin},
      {"cos", Code::kCos},           {"tanh", Code::kTanh},
      {"sigmoid", Code::kSigmoid},   {"relu", Code::kRelu},
      {"silu", Code::kSilu},         {"gelu", Code::kGelu},
      {"clamp", Code::kClamp},       {"add_scalar", Code::kAddScalar},
      {"sub_scalar", Code::kSubScalar}, {"rsub_scalar", Code::kRsubScalar},
      {"mul_scalar", Code::kMulScalar}, {"div_scalar", Code::kDivScalar},
      {"rdiv_scalar", Code::kRdivScalar}, {"pow_scalar", Code::kPowScalar},
      {"rpow_scalar", Code::kRpowScalar}, {"add", Code::kAdd},
      {"sub", Code::kSub},           {"mul", Code::kMul},
      {"div", Code::kDiv},           {"pow", Code::kPow},
      {"maximum", Code::kMaximum},   {"minimum", Code::kMinimum},
      {"relu_grad", Code::kReluGrad}, {"gelu_grad", Code::kGeluGrad},
      {"where", Code::kWhere},       {"copy", Code::kCopy}};
  auto it = codes.find(op);
  if (it == codes.end()) fail("fused_elementwise", "no CPU code for op '", op, "'");
  return it->second;
}

// A step ready to run on T: its code, where its arguments live, and its constants.
template <typename T>
struct CompiledStep {
  Code code;
  std::vector<int> args;
  T scalar{}, lo{}, hi{};
  bool tanh_form = false;
};

template <typename T>
std::vector<CompiledStep<T>> compile(const fused::Program& program) {
  std::vector<CompiledStep<T>> steps;
  for (const auto& step : program.steps) {
    CompiledStep<T> compiled{code_of(step.op), step.args};
    const Attrs& attrs = step.attrs;
    if (attrs.has("scalar")) compiled.scalar = attrs.get<Scalar>("scalar").to<T>();
    if (attrs.has("approximate")) compiled.tanh_form = attrs.get<std::string>("approximate") == "tanh";
    if (compiled.code == Code::kClamp) {
      compiled.lo = attrs.get<bool>("has_min") ? attrs.get<Scalar>("min").to<T>() : std::numeric_limits<T>::lowest();
      compiled.hi = attrs.get<bool>("has_max") ? attrs.get<Scalar>("max").to<T>() : std::numeric_limits<T>::max();
    }
    steps.push_back(std::move(compiled));
  }
  return steps;
}

// Decoding a program costs more than a small tile loop, so each distinct program is decoded once
// while it is among the fused_program_cache_capacity() most recently run.
std::shared_ptr<const fused::Program> cached_program(const std::string& text) {
  static LruCache<std::string, const fused::Program> cache(fused_program_cache_capacity());
  return cache.get_or_make(text, [&] { return std::make_shared<const fused::Program>(fused::decode(text)); });
}

// A rounding step's float16/bfloat16 output.
struct RoundedOutput {
  void* data = nullptr;
  bool bfloat16 = false;
};

// What the tile loop of one call needs: the program's steps, where its operands and outputs live.
template <typename T>
struct TilePlan {
  std::vector<CompiledStep<T>> steps;
  std::vector<T*> step_output;               // the op's output buffer for output steps
  std::vector<RoundedOutput> rounded_output;  // the 16-bit output of a rounding step
  std::vector<DType> operand_dtype;
  std::vector<const T*> operand_data;         // null for 16-bit operands
  std::vector<const void*> reduced_data;      // 16-bit float operands (of float32 programs), converted tile by tile
  std::vector<fused::OperandLayout> layouts;
  // Operands read through a tile copy: broadcast and 16-bit ones, and outputs read before being written.
  std::vector<bool> copy_tile;
};

// Each copy of the loops in its own namespace, so that unqualified calls stay within one copy.
namespace baseline {
#define FLOW_TILE_TARGET
#include "core/kernels/cpu/fused_tiles.inc"
#undef FLOW_TILE_TARGET
}  // namespace baseline
namespace avx512 {
#define FLOW_TILE_TARGET FLOW_AVX512_CORE_TARGET
#include "core/kernels/cpu/fused_tiles.inc"
#undef FLOW_TILE_TARGET
}  // namespace avx512

// Operands are ctx.inputs from `first_operand` on (the in-place form's destinations come first).
template <typename T>
void run_program(KernelContext& ctx, const fused::Program& program, size_t first_operand) {
  TilePlan<T> plan;
  plan.steps = compile<T>(program);
  const int64_t numel = ctx.outputs[0].shape().numel();
  const size_t num_steps = plan.steps.size();
  plan.step_output.assign(num_steps, nullptr);
  plan.rounded_output.assign(num_steps, {});
  for (size_t o = 0; o < program.outputs.size(); ++o) {
    const Tensor& out = ctx.outputs[o];
    if (out.dtype() == ctx.inputs[first_operand].dtype()) plan.step_output[program.outputs[o]] = static_cast<T*>(out.data_ptr());
    else plan.rounded_output[program.outputs[o]] = {out.data_ptr(), out.dtype() == kBFloat16};
  }
  std::vector<std::vector<T>> widened;  // bool operands as 0 and 1 of T (moving a vector keeps its buffer)
  for (size_t k = first_operand; k < ctx.inputs.size(); ++k) {
    const Tensor& operand = ctx.inputs[k];
    const T* data = nullptr;
    plan.layouts.push_back(*fused::operand_layout(operand.shape(), ctx.outputs[0].shape()));
    plan.operand_dtype.push_back(operand.dtype());
    const bool reduced = is_reduced_floating(operand.dtype());
    plan.reduced_data.push_back(reduced ? operand.data_ptr() : nullptr);
    if (reduced) {
      plan.operand_data.push_back(nullptr);
      plan.copy_tile.push_back(true);
      continue;
    }
    if (operand.dtype() == kBool) {
      const bool* flags = static_cast<const bool*>(operand.data_ptr());
      widened.emplace_back(flags, flags + operand.numel());
      data = widened.back().data();
    } else {
      data = static_cast<const T*>(operand.data_ptr());
    }
    plan.operand_data.push_back(data);
    // An operand that is also an output buffer must be copied if a step after the one writing it
    // reads it (the writing step itself reads each element before writing it).
    const auto writer = std::find(plan.step_output.begin(), plan.step_output.end(), data);
    bool read_after_write = false;
    for (size_t j = writer - plan.step_output.begin() + 1; j < num_steps; ++j) {
      for (int arg : plan.steps[j].args) read_after_write = read_after_write || arg == static_cast<int>(k - first_operand);
    }
    plan.copy_tile.push_back(read_after_write || !(plan.layouts.back().inner == 1 && plan.layouts.back().size == numel));
  }
  const bool wide = dnnl_util::has_avx512_core();
  parallel_for(0, numel, kElementwiseGrain, [&](int64_t begin, int64_t end) {
    if (wide) avx512::run_range(plan, begin, end);
    else baseline::run_range(plan, begin, end);
  });
}

void fused_kernel(KernelContext& ctx) {
  const std::shared_ptr<const fused::Program> program = cached_program(ctx.attrs.get<std::string>("program"));
  const size_t destinations = ctx.attrs.has("destinations") ? static_cast<size_t>(ctx.attrs.get<int64_t>("destinations")) : 0;
  // The program's dtype is its first operand's (an output may be a rounded 16-bit one).
  FLOW_DISPATCH_FLOATING(ctx.inputs.at(destinations).dtype(), "fused_elementwise", [&]<typename T>() {
    if constexpr (std::is_floating_point_v<T>) run_program<T>(ctx, *program, destinations);
    else fail("fused_elementwise", "float32 or float64 only");
  });
}

// The linear's result goes into the first output's memory, which the program then reads as its
// operand 0 (tile by tile, before overwriting it when that output is the program's own).
void fused_linear_kernel(KernelContext& ctx) {
  const auto linear_inputs = static_cast<size_t>(ctx.attrs.get<int64_t>("linear_inputs"));
  const TensorList linear_in(ctx.inputs.begin(), ctx.inputs.begin() + static_cast<std::ptrdiff_t>(linear_inputs));
  TensorList linear_out{ctx.outputs[0]};
  KernelContext linear_ctx{linear_in, linear_out, ctx.attrs};
  linear_kernel(linear_ctx);
  TensorList operands{ctx.outputs[0]};
  operands.insert(operands.end(), ctx.inputs.begin() + static_cast<std::ptrdiff_t>(linear_inputs), ctx.inputs.end());
  KernelContext program_ctx{operands, ctx.outputs, ctx.attrs};
  const std::shared_ptr<const fused::Program> program = cached_program(ctx.attrs.get<std::string>("program"));
  FLOW_DISPATCH_FLOATING(ctx.inputs[0].dtype(), "fused_linear", [&]<typename T>() { run_program<T>(program_ctx, *program, 0); });
}

// The program alone, over float32 operands: what a bfloat16 fused_linear runs (widened) after
// its product.
void program_kernel(KernelContext& ctx) {
  run_program<float>(ctx, *cached_program(ctx.attrs.get<std::string>("program")), 0);
}

// Whether the program is relu of the product alone (the fusion pass's Linear + ReLU).
bool is_relu_of_product(const fused::Program& program) {
  return program.steps.size() == 1 && program.steps[0].op == "relu" && program.steps[0].args == std::vector<int>{0} &&
         program.steps[0].attrs.values().empty() && program.outputs == std::vector<int>{0};
}

// bfloat16: the product through oneDNN into float32 where the CPU multiplies bfloat16, then the
// program in float32, rounded once, as the whole op computed in float32 would (its product is not
// rounded before the epilogue either).
void fused_linear_bf16_kernel(KernelContext& ctx) {
  const auto linear_inputs = static_cast<size_t>(ctx.attrs.get<int64_t>("linear_inputs"));
  // Rounding to bfloat16 keeps signs, zeros and NaN, so relu then rounding is rounding then relu:
  // oneDNN writes the rounded product, and relu runs on it in place (a float32 product and a pass
  // of the epilogue over it cost the AMP MLP's linears ~40% of their time).
  if (linear_inputs == ctx.inputs.size() && is_relu_of_product(*cached_program(ctx.attrs.get<std::string>("program"))) &&
      onednn_linear(ctx.inputs[0], ctx.inputs[1], linear_inputs == 3 ? ctx.inputs[2] : Tensor(), ctx.outputs[0])) {
    unary_loop<BFloat16, BFloat16>(ctx.outputs[0], ctx.outputs[0], [](BFloat16 x) { return math::relu(x); });
    return;
  }
  Tensor product = make_tensor(ctx.outputs[0].shape(), kFloat32, ctx.outputs[0].device());
  if (!onednn_linear(ctx.inputs[0], ctx.inputs[1], linear_inputs == 3 ? ctx.inputs[2] : Tensor(), product)) return in_float32<fused_linear_kernel>(ctx);
  TensorList operands{product};
  operands.insert(operands.end(), ctx.inputs.begin() + static_cast<std::ptrdiff_t>(linear_inputs), ctx.inputs.end());
  KernelContext program_ctx{operands, ctx.outputs, ctx.attrs};
  in_float32<program_kernel>(program_ctx);
}

const std::vector<DType> kFusedDtypes{kFloat32, kFloat64};
FLOW_REGISTER_KERNEL("fused_linear", DeviceType::kCPU, {kBFloat16}, fused_linear_bf16_kernel);
FLOW_REGISTER_KERNEL("fused_linear", DeviceType::kCPU, kFusedDtypes, fused_linear_kernel);
FLOW_REGISTER_KERNEL("fused_elementwise", DeviceType::kCPU, kFusedDtypes, fused_kernel);
FLOW_REGISTER_KERNEL("fused_elementwise_inplace", DeviceType::kCPU, kFusedDtypes, fused_kernel);

}  // namespace
}  // namespace flow::cpu
