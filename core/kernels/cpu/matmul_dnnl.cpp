// matmul and linear through oneDNN where it has kernels worth taking on this CPU (matmul.h):
// bfloat16 where the CPU multiplies it natively (AVX512-BF16, AMX: 64x784 @ 784x512 took 26 us
// against 294 us in float32 on a Xeon with AMX, one thread), accumulating in float32 and rounding
// each output once; float32 with oneDNN's brgemm kernels (AVX-512 and up: 174 GFLOP/s per thread
// on that Xeon, where OpenBLAS 0.3.21 reached 35). Elsewhere bfloat16 products are computed in
// float32 and rounded, as every other 16-bit op on the CPU, and float32 ones go to OpenBLAS.
#include <algorithm>
#include <map>
#include <optional>

#include "core/kernels/cpu/dnnl_util.h"
#include "core/kernels/cpu/matmul.h"
#include "core/kernels/cpu/reduced_float.h"
#include "core/ops/copy.h"

namespace flow::cpu {
namespace {

using namespace dnnl_util;
using dnnl_type = memory::data_type;

// One (m, k) @ (k, n) product with the operands' strides and types, and whether a bias row is added.
struct ProductKey {
  int64_t m, k, n;
  Dims a_strides, b_strides;
  bool bias;
  dnnl_type operands, result;
  auto tie() const { return std::tie(m, k, n, a_strides, b_strides, bias, operands, result); }
  bool operator<(const ProductKey& other) const { return tie() < other.tie(); }
};

struct Product {
  dnnl::matmul primitive;
  memory::desc a, b, bias, c;
};

bool worth_taking(const char* implementation, dnnl_type operands) {
  if (is_reference_implementation(implementation)) return false;
  return operands != dnnl_type::f32 || std::string_view(implementation).starts_with("brg");
}

// nullopt where oneDNN has no kernel worth taking for the product on this CPU.
std::shared_ptr<const std::optional<Product>> product(const ProductKey& key) {
  return cached_primitives<std::optional<Product>>(key, [](const ProductKey& key) -> std::optional<Product> {
    const memory::desc a({key.m, key.k}, key.operands, key.a_strides), b({key.k, key.n}, key.operands, key.b_strides);
    const memory::desc c = plain({key.m, key.n}, key.result), bias = key.bias ? plain({1, key.n}, key.operands) : memory::desc();
    try {
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, bias, c), user_scratchpad(), engine());
      if (!worth_taking(pd.impl_info_str(), key.operands)) return std::nullopt;
      return Product{dnnl::matmul(pd), a, b, bias, c};
    } catch (const dnnl::error&) {
      return std::nullopt;
    }
  });
}

// oneDNN's brgemm kernels need AVX-512; below it no float32 product is worth a lookup.
bool has_brgemm() { return has_avx512_core(); }

// The product's key when oneDNN could take operands of `operands` into `result`. A float32 product
// of one row stays with OpenBLAS's GEMV: brgemm packs the whole weight matrix on each call (on a
// 2-vCPU Xeon, 1x784 @ 784x512 took 81 us; oneflow_lite's MLP at batch 1, three such products,
// went 193 -> 93 us on 1 thread and 188 -> 21 us on 2, where GEMV's threads each keep their part
// of the weights in their own L2).
std::optional<ProductKey> key_for(DType operands, DType result, int64_t m, int64_t k, int64_t n, Dims a_strides, Dims b_strides,
                                  bool bias) {
  const auto operand_type = data_type_of(operands), result_type = data_type_of(result);
  if (!operand_type || !result_type || (result != operands && result != kFloat32) || m == 0 || k == 0 || n == 0) return std::nullopt;
  if (operands == kFloat32 && (!has_brgemm() || m == 1)) return std::nullopt;
  return ProductKey{m, k, n, std::move(a_strides), std::move(b_strides), bias, *operand_type, *result_type};
}

// Each thread gets at least kMinProductMacsPerThread of the product (matmul.h).
int product_threads(const ProductKey& key) {
  const double macs = static_cast<double>(key.m) * static_cast<double>(key.k) * static_cast<double>(key.n);
  return static_cast<int>(std::clamp(macs / static_cast<double>(kMinProductMacsPerThread), 1.0, static_cast<double>(current_num_threads())));
}

void run(const Product& p, const void* a, const void* b, const void* bias, void* c) {
  dnnl::stream stream = stream_for_call();
  auto bound = [](const memory::desc& desc, const void* data) { return memory(desc, engine(), const_cast<void*>(data)); };
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, bound(p.a, a)}, {DNNL_ARG_WEIGHTS, bound(p.b, b)}, {DNNL_ARG_DST, bound(p.c, c)}};
  if (bias != nullptr) args.emplace(DNNL_ARG_BIAS, bound(p.bias, bias));
  run_primitive(p.primitive, stream, std::move(args));
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

// The strides oneDNN reads t with (`strides`: matrix_strides(t)): its own, or those of the
// contiguous copy operand() makes.
Dims operand_strides(const Tensor& t, const Dims& strides) { return strides.empty() ? Dims{t.size(-1), 1} : strides; }

Tensor operand(const Tensor& t, const Dims& strides) { return strides.empty() ? detail::contiguous_copy(t) : t; }

const std::byte* bytes(const Tensor& t) { return static_cast<const std::byte*>(t.data_ptr()); }

void matmul_bf16_kernel(KernelContext& ctx) {
  if (!onednn_matmul(ctx.inputs[0], ctx.inputs[1], ctx.outputs[0])) in_float32<matmul_kernel>(ctx);
}

void linear_bf16_kernel(KernelContext& ctx) {
  if (!onednn_linear(ctx.inputs[0], ctx.inputs[1], ctx.inputs.size() == 3 ? ctx.inputs[2] : Tensor(), ctx.outputs[0])) {
    in_float32<linear_kernel>(ctx);
  }
}

FLOW_REGISTER_KERNEL("matmul", DeviceType::kCPU, {kBFloat16}, matmul_bf16_kernel);
FLOW_REGISTER_KERNEL("linear", DeviceType::kCPU, {kBFloat16}, linear_bf16_kernel);

// Whether a bfloat16 product whose first operand is a large transposed view with many more rows
// than the output has columns (a weight gradient g^T @ x of an LM head: 50257 x 1024 @ 1024 x
// 256) runs faster as its transpose x^T @ g, written out and transposed into place: oneDNN's
// brgemm packs such an A slowly for some leading dimensions (on one Zen 4 thread 84-86 ms at
// 50257 and 50272 rows, 64-67 at 50256 and 50264), where the transposed product took 61-62 ms at
// all four and the transposing copy 2-4 ms. Float32 is left alone: there the transposed product
// was slower for other sizes (77 against 74 ms at 32000 rows).
bool transposed_product_faster(const Tensor& a, const Dims& strides_a, const Dims& strides_b, int64_t m, int64_t k, int64_t n) {
  constexpr int64_t kMinTransposedElements = int64_t{32} << 20;
  return a.dtype() == kBFloat16 && a.dim() == 2 && strides_a.size() == 2 && strides_a[1] != 1 && strides_a[0] == 1 && strides_b.size() == 2 &&
         strides_b[1] == 1 && m >= 4 * n && m * k >= kMinTransposedElements;
}

// A tile product's shape, layout and scaling (onednn_tile_product).
struct TileKey {
  int64_t m, n, k, lda, ldb, ldc;
  bool trans_a, trans_b;
  float alpha, beta;
  dnnl_type operands;
  auto tie() const { return std::tie(m, n, k, lda, ldb, ldc, trans_a, trans_b, alpha, beta, operands); }
  bool operator<(const TileKey& other) const { return tie() < other.tie(); }
};

// nullopt where oneDNN has no kernel worth taking for the tile product on this CPU.
std::shared_ptr<const std::optional<Product>> tile_product(const TileKey& key) {
  return cached_primitives<std::optional<Product>>(key, [](const TileKey& key) -> std::optional<Product> {
    const memory::desc a({key.m, key.k}, key.operands, key.trans_a ? Dims{1, key.lda} : Dims{key.lda, 1});
    const memory::desc b({key.k, key.n}, key.operands, key.trans_b ? Dims{1, key.ldb} : Dims{key.ldb, 1});
    const memory::desc c({key.m, key.n}, dnnl_type::f32, Dims{key.ldc, 1});
    dnnl::primitive_attr attr = user_scratchpad();
    if (key.alpha != 1.0f) attr.set_output_scales(0, {key.alpha});
    if (key.beta != 0.0f) {
      dnnl::post_ops sum;
      sum.append_sum(key.beta);
      attr.set_post_ops(sum);
    }
    try {
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine());
      if (!worth_taking(pd.impl_info_str(), key.operands)) return std::nullopt;
      return Product{dnnl::matmul(pd), a, b, memory::desc(), c};
    } catch (const dnnl::error&) {
      return std::nullopt;
    }
  });
}

}  // namespace

bool onednn_tile_product(DType operands, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void* a,
                         int64_t lda, const void* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const auto operand_type = data_type_of(operands);
  if (!operand_type || (operands == kFloat32 && !has_brgemm()) || m == 0 || n == 0 || k == 0) return false;
  // Each thread keeps its recent tile products bound to memory objects and swaps only their data
  // pointers per call: making the memory objects, the argument map and a stream per call cost a
  // third as much as a 64x64x64 bfloat16 product itself.
  struct BoundTile {
    std::shared_ptr<const std::optional<Product>> product;
    std::unordered_map<int, memory> args;
    size_t scratchpad_bytes = 0;
  };
  constexpr size_t kBoundTilesPerThread = 64;
  thread_local std::map<TileKey, BoundTile> bound_tiles;
  thread_local dnnl::stream stream(engine());
  const TileKey key{m, n, k, lda, ldb, ldc, trans_a, trans_b, alpha, beta, *operand_type};
  auto found = bound_tiles.find(key);
  if (found == bound_tiles.end()) {
    if (bound_tiles.size() >= kBoundTilesPerThread) bound_tiles.clear();
    const ThreadCapScope cap(1);  // made for one thread: it runs inside the caller's parallel region
    BoundTile tile{tile_product(key), {}, 0};
    if (*tile.product) {
      const Product& p = **tile.product;
      tile.args = {{DNNL_ARG_SRC, memory(p.a, engine(), nullptr)},
                   {DNNL_ARG_WEIGHTS, memory(p.b, engine(), nullptr)},
                   {DNNL_ARG_DST, memory(p.c, engine(), nullptr)}};
      const memory::desc scratchpad = scratchpad_desc(p.primitive);
      tile.scratchpad_bytes = scratchpad.get_size();
      if (tile.scratchpad_bytes > 0) tile.args.emplace(DNNL_ARG_SCRATCHPAD, memory(scratchpad, engine(), nullptr));
    }
    found = bound_tiles.emplace(key, std::move(tile)).first;
  }
  BoundTile& tile = found->second;
  if (!*tile.product) return false;
  tile.args.at(DNNL_ARG_SRC).set_data_handle(const_cast<void*>(a));
  tile.args.at(DNNL_ARG_WEIGHTS).set_data_handle(const_cast<void*>(b));
  tile.args.at(DNNL_ARG_DST).set_data_handle(c);
  if (tile.scratchpad_bytes > 0) tile.args.at(DNNL_ARG_SCRATCHPAD).set_data_handle(thread_scratchpad(tile.scratchpad_bytes));
  (*tile.product)->primitive.execute(stream, tile.args);
  stream.wait();
  return true;
}

bool onednn_matmul(const Tensor& a, const Tensor& b, Tensor& out) {
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  const Dims strides_a = matrix_strides(a), strides_b = matrix_strides(b);
  if (out.dim() == 2 && b.dim() == 2 && out.dtype() == a.dtype() && transposed_product_faster(a, strides_a, strides_b, m, k, n)) {
    Tensor transposed = make_tensor(Shape{n, m}, out.dtype(), out.device());
    if (!onednn_matmul(b.t(), a.t(), transposed)) return false;
    detail::copy_into(out, transposed.t());
    return true;
  }
  const auto key = key_for(a.dtype(), out.dtype(), m, k, n, operand_strides(a, strides_a), operand_strides(b, strides_b), false);
  if (!key) return false;
  const ThreadCapScope cap(product_threads(*key));
  const auto cached = product(*key);  // held while it runs: another thread may evict it
  const std::optional<Product>& p = *cached;
  if (!p) return false;
  const Tensor oa = operand(a, strides_a), ob = operand(b, strides_b);
  const Shape out_batch(out.shape().begin(), out.shape().end() - 2);
  const auto offsets_a = batch_offsets(oa, out_batch), offsets_b = batch_offsets(ob, out_batch);
  const auto in_size = static_cast<int64_t>(itemsize(a.dtype())), out_size = static_cast<int64_t>(itemsize(out.dtype()));
  auto* c = static_cast<std::byte*>(out.data_ptr());
  for (size_t i = 0; i < offsets_a.size(); ++i) {
    run(*p, bytes(oa) + offsets_a[i] * in_size, bytes(ob) + offsets_b[i] * in_size, nullptr, c + static_cast<int64_t>(i) * m * n * out_size);
  }
  return true;
}

bool onednn_linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out) {
  const int64_t in_features = w.size(1), out_features = w.size(0);
  const int64_t rows = out_features == 0 ? 0 : out.numel() / out_features;
  const auto key = key_for(x.dtype(), out.dtype(), rows, in_features, out_features, {in_features, 1}, {1, in_features}, bias.defined());
  if (!key) return false;
  const ThreadCapScope cap(product_threads(*key));
  const auto cached = product(*key);  // held while it runs: another thread may evict it
  const std::optional<Product>& p = *cached;
  if (!p) return false;
  run(*p, x.data_ptr(), w.data_ptr(), bias.defined() ? bias.data_ptr() : nullptr, out.data_ptr());
  return true;
}

}  // namespace flow::cpu
