// CPU kernel of fused_elementwise: the output is cut into tiles of kTile elements; for each tile
// every step runs as its own tight (vectorisable) loop over tile buffers that stay in L1, and
// only the program's outputs are written to memory.
#include <glog/logging.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>

#include "core/kernels/cpu/convert.h"
#include "core/kernels/cpu/elementwise_math.h"
#include "core/kernels/cpu/loop.h"
#include "core/kernels/cpu/matmul.h"
#include "core/kernels/cpu/reduced_float.h"
#include "core/op.h"
#include "core/ops/fused.h"
#include "core/thread_pool.h"

namespace flow::cpu {
namespace {

constexpr int64_t kTile = 512;

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

// Decoding a program costs more than a small tile loop, so each distinct program is decoded once.
std::shared_ptr<const fused::Program> cached_program(const std::string& text) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const fused::Program>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = cache[text];
  if (!slot) slot = std::make_shared<const fused::Program>(fused::decode(text));
  return slot;
}

// Element-wise loops. A step's output is a scratch tile, an output buffer, or (in place) exactly
// one of its arguments — never a partial overlap — so each case gets a loop whose pointers are
// declared free of aliasing and vectorises (a possible overlap would keep GCC's loop scalar).
template <typename T, typename F>
void map1(const T* a, T* out, int64_t n, F f) {
  if (out == a) {
    T* __restrict inout = out;
    for (int64_t i = 0; i < n; ++i) inout[i] = f(inout[i]);
    return;
  }
  const T* __restrict in = a;
  T* __restrict result = out;
  for (int64_t i = 0; i < n; ++i) result[i] = f(in[i]);
}
template <typename T, typename F>
void map2(const T* a, const T* b, T* out, int64_t n, F f) {
  if (out == a && out != b) {
    T* __restrict inout = out;
    const T* __restrict second = b;
    for (int64_t i = 0; i < n; ++i) inout[i] = f(inout[i], second[i]);
    return;
  }
  if (out == b && out != a) {
    const T* __restrict first = a;
    T* __restrict inout = out;
    for (int64_t i = 0; i < n; ++i) inout[i] = f(first[i], inout[i]);
    return;
  }
  if (out == a || out == b || a == b) {
    for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
    return;
  }
  const T* __restrict first = a;
  const T* __restrict second = b;
  T* __restrict result = out;
  for (int64_t i = 0; i < n; ++i) result[i] = f(first[i], second[i]);
}

template <typename T>
void run_step(const CompiledStep<T>& step, const T* a, const T* b, const T* c, T* out, int64_t n) {
  const T s = step.scalar;
  switch (step.code) {
    case Code::kWhere:  // a is the condition, read as 0 or 1; out may be any of the three
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] != T(0) ? b[i] : c[i];
      return;
    case Code::kCopy: return map1(a, out, n, [](T x) { return x; });  // operands were converted as they were loaded
    case Code::kNeg: return map1(a, out, n, [](T x) { return math::neg(x); });
    case Code::kAbs: return map1(a, out, n, [](T x) { return math::abs(x); });
    case Code::kSign: return map1(a, out, n, [](T x) { return math::sign(x); });
    case Code::kExp: return map1(a, out, n, [](T x) { return std::exp(x); });
    case Code::kLog: return map1(a, out, n, [](T x) { return std::log(x); });
    case Code::kSqrt: return map1(a, out, n, [](T x) { return std::sqrt(x); });
    case Code::kRsqrt: return map1(a, out, n, [](T x) { return math::rsqrt(x); });
    case Code::kSin: return map1(a, out, n, [](T x) { return std::sin(x); });
    case Code::kCos: return map1(a, out, n, [](T x) { return std::cos(x); });
    case Code::kTanh: return map1(a, out, n, [](T x) { return std::tanh(x); });
    case Code::kSigmoid: return map1(a, out, n, [](T x) { return math::sigmoid(x); });
    case Code::kRelu: return map1(a, out, n, [](T x) { return math::relu(x); });
    case Code::kSilu: return map1(a, out, n, [](T x) { return math::silu(x); });
    case Code::kGelu:  // the form chosen outside the loop, which then vectorises
      if (step.tanh_form) return map1(a, out, n, [](T x) { return math::gelu(x, true); });
      return map1(a, out, n, [](T x) { return math::gelu(x, false); });
    case Code::kClamp: return map1(a, out, n, [&](T x) { return math::clamp(x, step.lo, step.hi); });
    case Code::kAddScalar: return map1(a, out, n, [s](T x) { return static_cast<T>(x + s); });
    case Code::kSubScalar: return map1(a, out, n, [s](T x) { return static_cast<T>(x - s); });
    case Code::kRsubScalar: return map1(a, out, n, [s](T x) { return static_cast<T>(s - x); });
    case Code::kMulScalar: return map1(a, out, n, [s](T x) { return static_cast<T>(x * s); });
    case Code::kDivScalar: return map1(a, out, n, [s](T x) { return math::divide(x, s); });
    case Code::kRdivScalar: return map1(a, out, n, [s](T x) { return math::divide(s, x); });
    case Code::kPowScalar: return map1(a, out, n, [s](T x) { return math::power(x, s); });
    case Code::kRpowScalar: return map1(a, out, n, [s](T x) { return math::power(s, x); });
    case Code::kAdd: return map2(a, b, out, n, [](T x, T y) { return static_cast<T>(x + y); });
    case Code::kSub: return map2(a, b, out, n, [](T x, T y) { return static_cast<T>(x - y); });
    case Code::kMul: return map2(a, b, out, n, [](T x, T y) { return static_cast<T>(x * y); });
    case Code::kDiv: return map2(a, b, out, n, [](T x, T y) { return math::divide(x, y); });
    case Code::kPow: return map2(a, b, out, n, [](T x, T y) { return math::power(x, y); });
    case Code::kMaximum: return map2(a, b, out, n, [](T x, T y) { return math::max_of(x, y); });
    case Code::kMinimum: return map2(a, b, out, n, [](T x, T y) { return math::min_of(x, y); });
    case Code::kReluGrad: return map2(a, b, out, n, [](T g, T y) { return math::relu_grad(g, y); });
    case Code::kGeluGrad:
      if (step.tanh_form) return map2(a, b, out, n, [](T g, T x) { return g * math::gelu_derivative(x, true); });
      return map2(a, b, out, n, [](T g, T x) { return g * math::gelu_derivative(x, false); });
  }
}

// tile[i] = src[((start + i) / inner) % size] converted to T, as contiguous runs: copied where the
// operand runs along the output (inner == 1), repeated where one operand value covers `inner`
// outputs.
template <typename T, typename S>
void gather_tile(const S* src, const fused::OperandLayout& layout, int64_t start, int64_t n, T* tile) {
  int64_t outer = (start / layout.inner) % layout.size, within = start % layout.inner;
  for (int64_t i = 0; i < n;) {
    if (layout.inner == 1) {
      const int64_t run = std::min(n - i, layout.size - outer);
      std::transform(src + outer, src + outer + run, tile + i, [](S v) { return static_cast<T>(v); });
      i += run;
      outer += run;
    } else {
      const int64_t run = std::min(n - i, layout.inner - within);
      std::fill_n(tile + i, run, static_cast<T>(src[outer]));
      i += run;
      ++outer;
      within = 0;
    }
    if (outer == layout.size) outer = 0;
  }
}

// A rounding step's tile, elements [start, start + n) of its float16/bfloat16 output, rounded as the
// copy op rounds (only float32 programs round).
template <typename T>
void store_rounded(const T* tile, const Tensor& out, int64_t start, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    const auto round_into = [&]<typename R>(R* __restrict destination) {
      for (int64_t i = 0; i < n; ++i) destination[i] = convert<R>(tile[i]);
    };
    if (out.dtype() == kBFloat16) round_into(static_cast<BFloat16*>(out.data_ptr()) + start);
    else round_into(static_cast<Half*>(out.data_ptr()) + start);
  } else {
    LOG(FATAL) << "fused_elementwise rounds float32 programs only";
  }
}

// Operands are ctx.inputs from `first_operand` on (the in-place form's destinations come first).
template <typename T>
void run_program(KernelContext& ctx, const fused::Program& program, size_t first_operand) {
  const std::vector<CompiledStep<T>> steps = compile<T>(program);
  const Shape& shape = ctx.outputs[0].shape();
  const int64_t numel = shape.numel();
  const size_t num_operands = ctx.inputs.size() - first_operand, num_steps = steps.size();
  std::vector<T*> step_output(num_steps, nullptr);  // the op's output buffer for output steps
  std::vector<const Tensor*> rounded_output(num_steps, nullptr);  // the 16-bit output of a rounding step
  for (size_t o = 0; o < program.outputs.size(); ++o) {
    const Tensor& out = ctx.outputs[o];
    if (out.dtype() == ctx.inputs[first_operand].dtype()) step_output[program.outputs[o]] = static_cast<T*>(out.data_ptr());
    else rounded_output[program.outputs[o]] = &out;
  }
  std::vector<const T*> operand_data;   // null for 16-bit operands
  std::vector<const void*> reduced_data;  // 16-bit float operands (of float32 programs), converted tile by tile
  std::vector<std::vector<T>> widened;    // bool operands as 0 and 1 of T (moving a vector keeps its buffer)
  std::vector<fused::OperandLayout> layouts;
  std::vector<bool> copy_tile;  // operands read through a tile copy: broadcast and 16-bit ones, and outputs read before being written
  for (size_t k = first_operand; k < ctx.inputs.size(); ++k) {
    const T* data = nullptr;
    layouts.push_back(*fused::operand_layout(ctx.inputs[k].shape(), shape));
    const bool reduced = is_reduced_floating(ctx.inputs[k].dtype());
    reduced_data.push_back(reduced ? ctx.inputs[k].data_ptr() : nullptr);
    if (reduced) {
      operand_data.push_back(nullptr);
      copy_tile.push_back(true);
      continue;
    }
    if (ctx.inputs[k].dtype() == kBool) {
      const Tensor& condition = ctx.inputs[k];
      const bool* flags = static_cast<const bool*>(condition.data_ptr());
      widened.emplace_back(flags, flags + condition.numel());
      data = widened.back().data();
    } else {
      data = static_cast<const T*>(ctx.inputs[k].data_ptr());
    }
    operand_data.push_back(data);
    // An operand that is also an output buffer must be copied if a step after the one writing it
    // reads it (the writing step itself reads each element before writing it).
    const auto writer = std::find(step_output.begin(), step_output.end(), data);
    bool read_after_write = false;
    for (size_t j = writer - step_output.begin() + 1; j < num_steps; ++j) {
      for (int arg : steps[j].args) read_after_write = read_after_write || arg == static_cast<int>(k - first_operand);
    }
    copy_tile.push_back(read_after_write || !(layouts.back().inner == 1 && layouts.back().size == numel));
  }

  // Operand k's elements [start, start + n) of the output's order into tile, as T.
  auto gather = [&](size_t k, int64_t start, int64_t n, T* tile) {
    const DType dtype = ctx.inputs[first_operand + k].dtype();
    if (dtype == kBFloat16) return gather_tile(static_cast<const BFloat16*>(reduced_data[k]), layouts[k], start, n, tile);
    if (dtype == kFloat16) return gather_tile(static_cast<const Half*>(reduced_data[k]), layouts[k], start, n, tile);
    gather_tile(operand_data[k], layouts[k], start, n, tile);
  };
  parallel_for(0, numel, kElementwiseGrain, [&](int64_t begin, int64_t end) {
    std::vector<T> scratch((num_operands + num_steps) * kTile);
    std::vector<const T*> operand_tile(num_operands);
    std::vector<const T*> step_tile(num_steps);
    for (size_t k = 0; k < num_operands; ++k) {
      if (layouts[k].size != 1) continue;
      T value;
      gather(k, 0, 1, &value);
      std::fill_n(scratch.data() + k * kTile, kTile, value);  // once per range
    }
    for (int64_t start = begin; start < end; start += kTile) {
      const int64_t n = std::min(kTile, end - start);
      for (size_t k = 0; k < num_operands; ++k) {
        if (!copy_tile[k] || layouts[k].size == 1) {
          operand_tile[k] = copy_tile[k] ? scratch.data() + k * kTile : operand_data[k] + start;
          continue;
        }
        T* tile = scratch.data() + k * kTile;
        gather(k, start, n, tile);
        operand_tile[k] = tile;
      }
      for (size_t j = 0; j < num_steps; ++j) {
        const CompiledStep<T>& step = steps[j];
        auto arg = [&](size_t a) -> const T* {
          const int ref = step.args[a];
          return ref >= 0 ? operand_tile[ref] : step_tile[-ref - 1];
        };
        if (step.code == Code::kCopy && !step_output[j]) {  // the operand's tile was converted as it was loaded
          if (rounded_output[j]) store_rounded(arg(0), *rounded_output[j], start, n);
          step_tile[j] = arg(0);
          continue;
        }
        T* out = step_output[j] ? step_output[j] + start : scratch.data() + (num_operands + j) * kTile;
        run_step(step, arg(0), step.args.size() > 1 ? arg(1) : nullptr, step.args.size() > 2 ? arg(2) : nullptr, out, n);
        step_tile[j] = out;
      }
    }
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
