// bfloat16 matmul and linear through oneDNN, which multiplies bfloat16 natively where the CPU can
// (AVX512-BF16, AMX: 64x784 @ 784x512 took 26 us against 294 us in float32 on a Xeon with AMX,
// one thread) and accumulates in float32, rounding each output once. Where oneDNN has no optimized
// bfloat16 kernel on the CPU (AVX2: none at all), the product is computed in float32 and rounded,
// as for every other 16-bit op on the CPU.
#include <optional>

#include "core/kernels/cpu/dnnl_util.h"
#include "core/kernels/cpu/matmul.h"
#include "core/kernels/cpu/reduced_float.h"
#include "core/ops/copy.h"

namespace flow::cpu {
namespace {

using namespace dnnl_util;

// One (m, k) @ (k, n) product with the operands' strides, and whether a bias row is added.
struct ProductKey {
  int64_t m, k, n;
  Dims a_strides, b_strides;
  bool bias;
  auto tie() const { return std::tie(m, k, n, a_strides, b_strides, bias); }
  bool operator<(const ProductKey& other) const { return tie() < other.tie(); }
};

struct Product {
  dnnl::matmul primitive;
  memory::desc a, b, bias, c;
};

// nullopt where oneDNN has no optimized bfloat16 kernel for the product on this CPU.
const std::optional<Product>& product(const ProductKey& key) {
  return cached_primitives<std::optional<Product>>(key, [](const ProductKey& key) -> std::optional<Product> {
    const auto bf16 = memory::data_type::bf16;
    const memory::desc a({key.m, key.k}, bf16, key.a_strides), b({key.k, key.n}, bf16, key.b_strides);
    const memory::desc c = plain({key.m, key.n}, bf16), bias = key.bias ? plain({1, key.n}, bf16) : memory::desc();
    try {
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, bias, c), user_scratchpad(), engine());
      if (is_reference_implementation(pd.impl_info_str())) return std::nullopt;
      return Product{dnnl::matmul(pd), a, b, bias, c};
    } catch (const dnnl::error&) {
      return std::nullopt;
    }
  });
}

void run(const Product& p, const void* a, const void* b, const void* bias, void* c) {
  dnnl::stream stream = stream_for_call();
  auto bound = [](const memory::desc& desc, const void* data) { return memory(desc, engine(), const_cast<void*>(data)); };
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, bound(p.a, a)}, {DNNL_ARG_WEIGHTS, bound(p.b, b)}, {DNNL_ARG_DST, bound(p.c, c)}};
  if (bias != nullptr) args.emplace(DNNL_ARG_BIAS, bound(p.bias, bias));
  run_primitive(p.primitive, stream, args);
  stream.wait();
}

// The strides of a matrix whose rows or columns are contiguous (a size-1 dim takes the dense
// stride), or none where oneDNN would need a copy.
Dims matrix_strides(const Tensor& t) {
  const int64_t rows = t.size(-2), cols = t.size(-1), rs = t.stride(-2), cs = t.stride(-1);
  if ((cs == 1 || cols == 1) && (rows == 1 || rs >= cols)) return {rows == 1 ? cols : rs, 1};
  if ((rs == 1 || rows == 1) && (cols == 1 || cs >= rows)) return {1, cols == 1 ? rows : cs};
  return {};
}

struct Operand {
  Tensor holder;  // t, or a contiguous copy of it
  Dims strides;
};

Operand operand(const Tensor& t) {
  Dims strides = matrix_strides(t);
  if (!strides.empty()) return {t, strides};
  return {detail::contiguous_copy(t), {t.size(-1), 1}};
}

const BFloat16* elements(const Tensor& t) { return static_cast<const BFloat16*>(t.data_ptr()); }

void matmul_bf16_kernel(KernelContext& ctx) {
  static const KernelFn in_float32 = computed_in_float32(matmul_kernel);
  const Tensor &a = ctx.inputs[0], &b = ctx.inputs[1];
  Tensor& out = ctx.outputs[0];
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  if (out.numel() == 0 || k == 0) return in_float32(ctx);
  const Operand oa = operand(a), ob = operand(b);
  const auto& p = product({m, k, n, oa.strides, ob.strides, false});
  if (!p) return in_float32(ctx);
  const Shape out_batch(out.shape().begin(), out.shape().end() - 2);
  const auto offsets_a = batch_offsets(oa.holder, out_batch), offsets_b = batch_offsets(ob.holder, out_batch);
  auto* c = static_cast<BFloat16*>(out.data_ptr());
  for (size_t i = 0; i < offsets_a.size(); ++i) {
    run(*p, elements(oa.holder) + offsets_a[i], elements(ob.holder) + offsets_b[i], nullptr, c + static_cast<int64_t>(i) * m * n);
  }
}

// x (rows x in) @ w^T, w (out x in) read as an (in x out) matrix with transposed strides.
void linear_bf16_kernel(KernelContext& ctx) {
  static const KernelFn in_float32 = computed_in_float32(linear_kernel);
  const Tensor &x = ctx.inputs[0], &w = ctx.inputs[1];
  Tensor& out = ctx.outputs[0];
  const int64_t in_features = w.size(1), out_features = w.size(0);
  const int64_t rows = out_features == 0 ? 0 : out.numel() / out_features;
  if (rows == 0 || out_features == 0 || in_features == 0) return in_float32(ctx);
  const bool has_bias = ctx.inputs.size() == 3;
  const auto& p = product({rows, in_features, out_features, {in_features, 1}, {1, in_features}, has_bias});
  if (!p) return in_float32(ctx);
  run(*p, x.data_ptr(), w.data_ptr(), has_bias ? ctx.inputs[2].data_ptr() : nullptr, out.data_ptr());
}

FLOW_REGISTER_KERNEL("matmul", DeviceType::kCPU, {kBFloat16}, matmul_bf16_kernel);
FLOW_REGISTER_KERNEL("linear", DeviceType::kCPU, {kBFloat16}, linear_bf16_kernel);

}  // namespace
}  // namespace flow::cpu
