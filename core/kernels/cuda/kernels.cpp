// Host side of the CUDA kernels: builds geometries from tensors, calls the device launchers
// (launch.h), and registers every kernel for DeviceType::kCUDA. GEMM goes to cuBLAS (cublas_api.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "core/allocator.h"
#include "core/kernels/cuda/cublas_api.h"
#include "core/kernels/cuda/host.h"
#include "core/kernels/cuda/launch.h"
#include "core/op.h"
#include "core/ops/copy.h"
#include "core/ops/view.h"

namespace flow::cuda {
namespace {

// Drops size-1 dims and merges neighbours that every operand walks as one (a contiguous run, or
// a broadcast over both), so that a dense op indexes one flat dim: the device then needs no
// 64-bit division per dim and operand, which made element-wise kernels compute-bound.
void merge_dims(Prepared& p) {
  Geometry& g = p.geometry;
  int kept = 0;
  for (int d = 0; d < g.ndim; ++d) {
    if (g.sizes[d] == 1) continue;
    const bool joins_previous = kept > 0 && std::all_of(p.operands.begin(), p.operands.end(), [&](const Operand& o) {
      return o.strides[kept - 1] == o.strides[d] * g.sizes[d];
    });
    if (joins_previous) {
      g.sizes[kept - 1] *= g.sizes[d];
      for (Operand& o : p.operands) o.strides[kept - 1] = o.strides[d];
    } else {
      g.sizes[kept] = g.sizes[d];
      for (Operand& o : p.operands) o.strides[kept] = o.strides[d];
      ++kept;
    }
  }
  g.ndim = kept;
}

}  // namespace

ScalarType scalar_type(DType dtype, const char* op) {
  switch (dtype) {
    case kFloat32: return ScalarType::kFloat32;
    case kFloat64: return ScalarType::kFloat64;
    case kInt64: return ScalarType::kInt64;
    case kInt32: return ScalarType::kInt32;
    case kUInt8: return ScalarType::kUInt8;
    case kInt8: return ScalarType::kInt8;
    case kBool: return ScalarType::kBool;
    case kFloat16: return ScalarType::kFloat16;
    case kBFloat16: return ScalarType::kBFloat16;
    default: fail(op, "dtype ", dtype_name(dtype), " is not supported on CUDA");
  }
}

void check(const char* error, const char* op) {
  if (error != nullptr) fail(op, "CUDA kernel failed: ", error);
}

void set_device(const Tensor& t, const char* op) {
  if (cudaSetDevice(t.device().index) != cudaSuccess) fail(op, "cannot select ", t.device());
}

Prepared prepare(const Tensor& out, const std::vector<const Tensor*>& inputs, const char* op) {
  Prepared p;
  const int64_t ndim = out.dim();
  if (ndim > kMaxDims) fail(op, "CUDA kernels support up to ", kMaxDims, " dimensions, got ", ndim);
  p.geometry.ndim = static_cast<int>(ndim);
  for (int64_t d = 0; d < ndim; ++d) p.geometry.sizes[d] = out.size(d);
  auto operand = [&](const Tensor& t) {
    Operand o;
    o.data = t.data_ptr();
    const int64_t lead = ndim - t.dim();
    for (int64_t d = 0; d < t.dim(); ++d) o.strides[d + lead] = t.size(d) == 1 ? 0 : t.stride(d);
    return o;
  };
  p.operands.push_back(operand(out));
  for (const Tensor* t : inputs) p.operands.push_back(operand(*t));
  merge_dims(p);
  return p;
}

namespace {

KernelFn unary_kernel(UnaryOp op, const char* name) {
  return [op, name](KernelContext& ctx) {
    set_device(ctx.outputs[0], name);
    Prepared p = prepare(ctx.outputs[0], {&ctx.inputs[0]}, name);
    check(unary(op, scalar_type(ctx.inputs[0].dtype(), name), p.geometry, ctx.outputs[0].numel(), p.operands[0], p.operands[1]), name);
  };
}

KernelFn gelu_kernel() {
  return [](KernelContext& ctx) {
    const UnaryOp op = ctx.attrs.get<std::string>("approximate") == "tanh" ? UnaryOp::kGeluTanh : UnaryOp::kGeluErf;
    unary_kernel(op, "gelu")(ctx);
  };
}

KernelFn binary_kernel(BinaryOp op, const char* name) {
  return [op, name](KernelContext& ctx) {
    set_device(ctx.outputs[0], name);
    Prepared p = prepare(ctx.outputs[0], {&ctx.inputs[0], &ctx.inputs[1]}, name);
    check(binary(op, scalar_type(ctx.inputs[0].dtype(), name), p.geometry, ctx.outputs[0].numel(), p.operands[0],
                 p.operands[1], p.operands[2]),
          name);
  };
}

// where(condition, a, b): the condition is bool, a and b share the output's dtype.
void where_kernel(KernelContext& ctx) {
  Tensor& out = ctx.outputs[0];
  set_device(out, "where");
  Prepared p = prepare(out, {&ctx.inputs[0], &ctx.inputs[1], &ctx.inputs[2]}, "where");
  check(where_select(scalar_type(out.dtype(), "where"), p.geometry, out.numel(), p.operands[0], p.operands[1], p.operands[2],
                     p.operands[3]),
        "where");
}

KernelFn scalar_kernel(BinaryOp op, const char* name) {
  return [op, name](KernelContext& ctx) {
    set_device(ctx.outputs[0], name);
    Prepared p = prepare(ctx.outputs[0], {&ctx.inputs[0]}, name);
    check(binary_scalar(op, scalar_type(ctx.inputs[0].dtype(), name), p.geometry, ctx.outputs[0].numel(), p.operands[0],
                        p.operands[1], ctx.attrs.get<Scalar>("scalar").to_double()),
          name);
  };
}

KernelFn compare_kernel(CompareOp op, const char* name) {
  return [op, name](KernelContext& ctx) {
    set_device(ctx.outputs[0], name);
    Prepared p = prepare(ctx.outputs[0], {&ctx.inputs[0], &ctx.inputs[1]}, name);
    check(compare(op, scalar_type(ctx.inputs[0].dtype(), name), p.geometry, ctx.outputs[0].numel(), p.operands[0],
                  p.operands[1], p.operands[2]),
          name);
  };
}

KernelFn compare_scalar_kernel(CompareOp op, const char* name) {
  return [op, name](KernelContext& ctx) {
    set_device(ctx.outputs[0], name);
    Prepared p = prepare(ctx.outputs[0], {&ctx.inputs[0]}, name);
    check(compare_scalar(op, scalar_type(ctx.inputs[0].dtype(), name), p.geometry, ctx.outputs[0].numel(),
                         p.operands[0], p.operands[1], ctx.attrs.get<Scalar>("scalar").to_double()),
          name);
  };
}

Tensor contiguous_raw(const Tensor& t);

// copy: any strides and dtypes on one device, or a move between host and device.
void copy_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.inputs[0];
  Tensor& out = ctx.outputs[0];
  if (in.device().is_cuda() && out.device().is_cuda() && in.device() == out.device()) {
    set_device(out, "copy");
    Prepared p = prepare(out, {&in}, "copy");
    check(cast(scalar_type(in.dtype(), "copy"), scalar_type(out.dtype(), "copy"), p.geometry, out.numel(), p.operands[0],
               p.operands[1]),
          "copy");
    return;
  }
  // Across devices: move contiguous bytes of the source dtype, then cast where the data now is.
  const Tensor source = contiguous_raw(in);
  Tensor staged = in.dtype() == out.dtype() && out.is_contiguous() ? out : make_tensor(in.shape(), in.dtype(), out.device());
  const Device cuda_device = in.device().is_cuda() ? in.device() : out.device();
  backend_for(cuda_device, "copy").copy(staged.data_ptr(), staged.device(), source.data_ptr(), source.device(),
                                        static_cast<size_t>(source.numel()) * itemsize(source.dtype()));
  if (!staged.same(out)) detail::copy_into(out, staged);
}

void full_kernel(KernelContext& ctx) {
  Tensor& out = ctx.outputs[0];
  set_device(out, "full");
  check(fill(scalar_type(out.dtype(), "full"), out.data_ptr(), out.numel(), ctx.attrs.get<Scalar>("value").to_double()), "full");
}

// Zeros of the input's shape with the gradient copied into the sliced positions.
void slice_grad_kernel(KernelContext& ctx) {
  Tensor& out = ctx.outputs[0];
  set_device(out, "slice_grad");
  check(fill(scalar_type(out.dtype(), "slice_grad"), out.data_ptr(), out.numel(), 0.0), "slice_grad");
  detail::copy_into(detail::slice_alias(out, ctx.attrs), ctx.inputs[0]);
}

void arange_kernel(KernelContext& ctx) {
  Tensor& out = ctx.outputs[0];
  set_device(out, "arange");
  check(arange(scalar_type(out.dtype(), "arange"), out.data_ptr(), out.numel(), ctx.attrs.get<Scalar>("start").to_double(),
               ctx.attrs.get<Scalar>("step").to_double()),
        "arange");
}

cublasHandle_t cublas_handle(int device) {
  static std::mutex mutex;
  static std::vector<cublasHandle_t> handles;
  std::lock_guard<std::mutex> lock(mutex);
  if (handles.size() <= static_cast<size_t>(device)) handles.resize(static_cast<size_t>(device) + 1, nullptr);
  if (handles[static_cast<size_t>(device)] == nullptr) {
    if (cublas_api("matmul").create(&handles[static_cast<size_t>(device)]) != CUBLAS_STATUS_SUCCESS) fail("matmul", "cublasCreate failed");
  }
  return handles[static_cast<size_t>(device)];
}

// Row-major C(m,n) = A(m,k) B(k,n) as column-major C^T = B^T A^T. transpose_b: B is given as (n,k).
void gemm(const Tensor& like, bool transpose_b, int64_t m, int64_t n, int64_t k, const void* a, const void* b, void* c,
          double beta, const char* op) {
  cublasHandle_t handle = cublas_handle(like.device().index);
  const CublasApi& cublas = cublas_api(op);
  const cublasOperation_t tb = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int ldb = static_cast<int>(transpose_b ? k : n);
  cublasStatus_t status;
  if (like.dtype() == kFloat16 || like.dtype() == kBFloat16) {
    // 16-bit operands on the tensor cores, accumulated in float32 and rounded once (as the CPU's
    // bfloat16 products): alpha and beta are float for CUBLAS_COMPUTE_32F.
    const cudaDataType_t type = like.dtype() == kFloat16 ? CUDA_R_16F : CUDA_R_16BF;
    const float alpha = 1.0f, beta_f = static_cast<float>(beta);
    status = cublas.gemm_ex(handle, tb, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b, type, ldb,
                            a, type, static_cast<int>(k), &beta_f, c, type, static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  } else if (like.dtype() == kFloat32) {
    const float alpha = 1.0f, beta_f = static_cast<float>(beta);
    status = cublas.sgemm(handle, tb, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha,
                          static_cast<const float*>(b), ldb, static_cast<const float*>(a), static_cast<int>(k), &beta_f,
                          static_cast<float*>(c), static_cast<int>(n));
  } else {
    const double alpha = 1.0;
    status = cublas.dgemm(handle, tb, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha,
                          static_cast<const double*>(b), ldb, static_cast<const double*>(a), static_cast<int>(k), &beta,
                          static_cast<double*>(c), static_cast<int>(n));
  }
  if (status != CUBLAS_STATUS_SUCCESS) fail(op, "cuBLAS GEMM failed with status ", static_cast<int>(status));
}

Tensor contiguous_raw(const Tensor& t) { return t.is_contiguous() ? t : detail::contiguous_copy(t); }

// Index of output batch i into operand t's (broadcast) batch dims, row-major.
int64_t operand_batch(const Tensor& t, const Shape& out_batch, int64_t i) {
  const int64_t batch_dims = t.dim() - 2, lead = out_batch.ndim() - batch_dims;
  std::vector<int64_t> index(out_batch.size());
  for (int64_t d = out_batch.ndim() - 1; d >= 0; --d) {
    index[static_cast<size_t>(d)] = i % out_batch[d];
    i /= out_batch[d];
  }
  int64_t linear = 0;
  for (int64_t d = 0; d < batch_dims; ++d) linear = linear * t.size(d) + (t.size(d) == 1 ? 0 : index[static_cast<size_t>(d + lead)]);
  return linear;
}

// Batched matmul over contiguous operands; broadcast batch dims resolved per batch.
void matmul_kernel(KernelContext& ctx) {
  const Tensor a = contiguous_raw(ctx.inputs[0]), b = contiguous_raw(ctx.inputs[1]);
  Tensor& out = ctx.outputs[0];
  set_device(out, "matmul");
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  if (out.numel() == 0) return;
  if (k == 0) {
    check(fill(scalar_type(out.dtype(), "matmul"), out.data_ptr(), out.numel(), 0.0), "matmul");
    return;
  }
  const Shape out_batch(out.shape().begin(), out.shape().end() - 2);
  const int64_t item = static_cast<int64_t>(itemsize(out.dtype()));
  for (int64_t i = 0; i < out_batch.numel(); ++i) {
    gemm(out, false, m, n, k, static_cast<const char*>(a.data_ptr()) + operand_batch(a, out_batch, i) * m * k * item,
         static_cast<const char*>(b.data_ptr()) + operand_batch(b, out_batch, i) * k * n * item,
         static_cast<char*>(out.data_ptr()) + i * m * n * item, 0.0, "matmul");
  }
}

// linear: bias broadcast into the output, then GEMM accumulates onto it.
void linear_kernel(KernelContext& ctx) {
  const Tensor x = ctx.inputs[0], w = ctx.inputs[1];
  Tensor& out = ctx.outputs[0];
  set_device(out, "linear");
  const int64_t out_features = w.size(0), in_features = w.size(1);
  const int64_t rows = out_features == 0 ? 0 : out.numel() / out_features;
  const bool has_bias = ctx.inputs.size() == 3;
  if (has_bias) detail::copy_into(out, ctx.inputs[2]);
  if (rows == 0 || out_features == 0) return;
  if (in_features == 0) {
    if (!has_bias) check(fill(scalar_type(out.dtype(), "linear"), out.data_ptr(), out.numel(), 0.0), "linear");
    return;
  }
  gemm(out, true, rows, out_features, in_features, x.data_ptr(), w.data_ptr(), out.data_ptr(), has_bias ? 1.0 : 0.0, "linear");
}

// The element-wise kernels, casts, fills and products also take float16 and bfloat16 (computed
// in float, rounded once): a mixed-precision step on CUDA runs in them.
const std::vector<DType> kArangeDtypes = {kFloat32, kFloat64, kInt64, kInt32, kUInt8, kInt8};
const std::vector<DType> kFloating = and_reduced(floating_dtypes());
const std::vector<DType> kNumeric = and_reduced(kArangeDtypes);
const std::vector<DType> kAllDtypes = and_reduced(kCudaDtypes);

FLOW_REGISTER_KERNEL("copy", DeviceType::kCUDA, kAllDtypes, copy_kernel);
FLOW_REGISTER_KERNEL("full", DeviceType::kCUDA, kAllDtypes, full_kernel);
FLOW_REGISTER_KERNEL("empty", DeviceType::kCUDA, kAllDtypes, [](KernelContext&) {});
FLOW_REGISTER_KERNEL("arange", DeviceType::kCUDA, kArangeDtypes, arange_kernel);
FLOW_REGISTER_KERNEL("slice_grad", DeviceType::kCUDA, kAllDtypes, slice_grad_kernel);
FLOW_REGISTER_KERNEL("neg", DeviceType::kCUDA, kNumeric, unary_kernel(UnaryOp::kNeg, "neg"));
FLOW_REGISTER_KERNEL("abs", DeviceType::kCUDA, kNumeric, unary_kernel(UnaryOp::kAbs, "abs"));
FLOW_REGISTER_KERNEL("relu", DeviceType::kCUDA, kNumeric, unary_kernel(UnaryOp::kRelu, "relu"));
FLOW_REGISTER_KERNEL("exp", DeviceType::kCUDA, kFloating, unary_kernel(UnaryOp::kExp, "exp"));
FLOW_REGISTER_KERNEL("log", DeviceType::kCUDA, kFloating, unary_kernel(UnaryOp::kLog, "log"));
FLOW_REGISTER_KERNEL("sqrt", DeviceType::kCUDA, kFloating, unary_kernel(UnaryOp::kSqrt, "sqrt"));
FLOW_REGISTER_KERNEL("rsqrt", DeviceType::kCUDA, kFloating, unary_kernel(UnaryOp::kRsqrt, "rsqrt"));
FLOW_REGISTER_KERNEL("sin", DeviceType::kCUDA, kFloating, unary_kernel(UnaryOp::kSin, "sin"));
FLOW_REGISTER_KERNEL("cos", DeviceType::kCUDA, kFloating, unary_kernel(UnaryOp::kCos, "cos"));
FLOW_REGISTER_KERNEL("tanh", DeviceType::kCUDA, kFloating, unary_kernel(UnaryOp::kTanh, "tanh"));
FLOW_REGISTER_KERNEL("sigmoid", DeviceType::kCUDA, kFloating, unary_kernel(UnaryOp::kSigmoid, "sigmoid"));
FLOW_REGISTER_KERNEL("silu", DeviceType::kCUDA, kFloating, unary_kernel(UnaryOp::kSilu, "silu"));
FLOW_REGISTER_KERNEL("gelu", DeviceType::kCUDA, kFloating, gelu_kernel());
FLOW_REGISTER_KERNEL("add", DeviceType::kCUDA, kNumeric, binary_kernel(BinaryOp::kAdd, "add"));
FLOW_REGISTER_KERNEL("sub", DeviceType::kCUDA, kNumeric, binary_kernel(BinaryOp::kSub, "sub"));
FLOW_REGISTER_KERNEL("mul", DeviceType::kCUDA, kNumeric, binary_kernel(BinaryOp::kMul, "mul"));
FLOW_REGISTER_KERNEL("div", DeviceType::kCUDA, kFloating, binary_kernel(BinaryOp::kDiv, "div"));
FLOW_REGISTER_KERNEL("maximum", DeviceType::kCUDA, kNumeric, binary_kernel(BinaryOp::kMaximum, "maximum"));
FLOW_REGISTER_KERNEL("minimum", DeviceType::kCUDA, kNumeric, binary_kernel(BinaryOp::kMinimum, "minimum"));
FLOW_REGISTER_KERNEL("pow", DeviceType::kCUDA, kFloating, binary_kernel(BinaryOp::kPow, "pow"));
FLOW_REGISTER_KERNEL("relu_grad", DeviceType::kCUDA, kNumeric, binary_kernel(BinaryOp::kReluGrad, "relu_grad"));
FLOW_REGISTER_KERNEL("where", DeviceType::kCUDA, {kBool}, where_kernel);
FLOW_REGISTER_KERNEL("add_scalar", DeviceType::kCUDA, kNumeric, scalar_kernel(BinaryOp::kAdd, "add_scalar"));
FLOW_REGISTER_KERNEL("sub_scalar", DeviceType::kCUDA, kNumeric, scalar_kernel(BinaryOp::kSub, "sub_scalar"));
FLOW_REGISTER_KERNEL("mul_scalar", DeviceType::kCUDA, kNumeric, scalar_kernel(BinaryOp::kMul, "mul_scalar"));
FLOW_REGISTER_KERNEL("div_scalar", DeviceType::kCUDA, kFloating, scalar_kernel(BinaryOp::kDiv, "div_scalar"));
FLOW_REGISTER_KERNEL("rsub_scalar", DeviceType::kCUDA, kNumeric, scalar_kernel(BinaryOp::kRsub, "rsub_scalar"));
FLOW_REGISTER_KERNEL("rdiv_scalar", DeviceType::kCUDA, kFloating, scalar_kernel(BinaryOp::kRdiv, "rdiv_scalar"));
FLOW_REGISTER_KERNEL("pow_scalar", DeviceType::kCUDA, kFloating, scalar_kernel(BinaryOp::kPow, "pow_scalar"));
FLOW_REGISTER_KERNEL("rpow_scalar", DeviceType::kCUDA, kFloating, scalar_kernel(BinaryOp::kRpow, "rpow_scalar"));
FLOW_REGISTER_KERNEL("eq", DeviceType::kCUDA, kAllDtypes, compare_kernel(CompareOp::kEq, "eq"));
FLOW_REGISTER_KERNEL("ne", DeviceType::kCUDA, kAllDtypes, compare_kernel(CompareOp::kNe, "ne"));
FLOW_REGISTER_KERNEL("lt", DeviceType::kCUDA, kAllDtypes, compare_kernel(CompareOp::kLt, "lt"));
FLOW_REGISTER_KERNEL("le", DeviceType::kCUDA, kAllDtypes, compare_kernel(CompareOp::kLe, "le"));
FLOW_REGISTER_KERNEL("gt", DeviceType::kCUDA, kAllDtypes, compare_kernel(CompareOp::kGt, "gt"));
FLOW_REGISTER_KERNEL("ge", DeviceType::kCUDA, kAllDtypes, compare_kernel(CompareOp::kGe, "ge"));
FLOW_REGISTER_KERNEL("eq_scalar", DeviceType::kCUDA, kAllDtypes, compare_scalar_kernel(CompareOp::kEq, "eq_scalar"));
FLOW_REGISTER_KERNEL("ne_scalar", DeviceType::kCUDA, kAllDtypes, compare_scalar_kernel(CompareOp::kNe, "ne_scalar"));
FLOW_REGISTER_KERNEL("lt_scalar", DeviceType::kCUDA, kAllDtypes, compare_scalar_kernel(CompareOp::kLt, "lt_scalar"));
FLOW_REGISTER_KERNEL("le_scalar", DeviceType::kCUDA, kAllDtypes, compare_scalar_kernel(CompareOp::kLe, "le_scalar"));
FLOW_REGISTER_KERNEL("gt_scalar", DeviceType::kCUDA, kAllDtypes, compare_scalar_kernel(CompareOp::kGt, "gt_scalar"));
FLOW_REGISTER_KERNEL("ge_scalar", DeviceType::kCUDA, kAllDtypes, compare_scalar_kernel(CompareOp::kGe, "ge_scalar"));
FLOW_REGISTER_KERNEL("matmul", DeviceType::kCUDA, kFloating, matmul_kernel);
FLOW_REGISTER_KERNEL("linear", DeviceType::kCUDA, kFloating, linear_kernel);

}  // namespace
}  // namespace flow::cuda
