#pragma once
// The boundary between host code (C++20, g++) and device code (.cu, nvcc): plain structs and
// launch functions only, so nvcc never parses the framework's headers.
#include <cstdint>

namespace flow::cuda {

constexpr int kMaxDims = 8;

// kFloat16 and kBFloat16 (storage types computed in float) are taken by the element-wise kernels,
// casts, fills, sums and cuBLAS products: what a mixed-precision step runs in 16 bits.
enum class ScalarType : int { kFloat32, kFloat64, kInt64, kInt32, kUInt8, kInt8, kBool, kFloat16, kBFloat16 };

// Output shape after merging dims; each operand's strides are in elements (0 where broadcast).
struct Geometry {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
};
struct Operand {
  void* data = nullptr;
  int64_t strides[kMaxDims] = {};
};

enum class UnaryOp : int { kNeg, kAbs, kExp, kLog, kSqrt, kRsqrt, kSin, kCos, kTanh, kSigmoid, kRelu, kGeluErf, kGeluTanh, kSilu };
// kReluGrad: a is the gradient, b the relu's output (a where b > 0, else 0).
enum class BinaryOp : int { kAdd, kSub, kMul, kDiv, kMaximum, kMinimum, kPow, kRsub, kRdiv, kRpow, kReluGrad };
enum class CompareOp : int { kEq, kNe, kLt, kLe, kGt, kGe };

// Each returns nullptr on success or the CUDA error string of the launch.
const char* unary(UnaryOp op, ScalarType type, const Geometry& g, int64_t numel, Operand out, Operand in);
const char* binary(BinaryOp op, ScalarType type, const Geometry& g, int64_t numel, Operand out, Operand a, Operand b);
const char* binary_scalar(BinaryOp op, ScalarType type, const Geometry& g, int64_t numel, Operand out, Operand a,
                          double scalar);
// out = condition (bool) ? a : b, every operand strided to out.
const char* where_select(ScalarType type, const Geometry& g, int64_t numel, Operand out, Operand condition, Operand a, Operand b);
// Writes bool.
const char* compare(CompareOp op, ScalarType type, const Geometry& g, int64_t numel, Operand out, Operand a, Operand b);
const char* compare_scalar(CompareOp op, ScalarType type, const Geometry& g, int64_t numel, Operand out, Operand a,
                           double scalar);
// Strided copy with conversion (also broadcast: stride 0).
const char* cast(ScalarType from, ScalarType to, const Geometry& g, int64_t numel, Operand out, Operand in);
const char* fill(ScalarType type, void* data, int64_t numel, double value);
const char* arange(ScalarType type, void* data, int64_t numel, double start, double step);

// 2-d pooling of `planes` (h, w) planes into (oh, ow) by (kh, kw) windows (floor mode).
struct PoolWindow {
  int64_t planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw;
};
// Max and first argmax (flat h*w index; indices may be null) of every window, NaN winning as in
// the CPU loops, so the indices are the CPU's (cuDNN has no argmax output).
const char* max_pool2d(ScalarType type, const PoolWindow& g, const void* in, void* out, int64_t* indices);
// grad_input[i] = sum of the grads whose argmax is i, gathered per input value in output order
// (deterministic, no atomics). An index outside its window contributes nothing.
const char* max_pool2d_grad(ScalarType type, const PoolWindow& g, const void* grad, const int64_t* indices, void* grad_input);
// Adds batch norm's input-gradient paths through its mean and invstd outputs to grad_input
// (n, c, s): grad_mean / m - grad_invstd * invstd^3 * (x - mean) / m per channel, m = n * s.
const char* batch_norm_statistics_grad(ScalarType type, int64_t n, int64_t c, int64_t s, const void* x, const void* mean,
                                       const void* invstd, const void* grad_mean, const void* grad_invstd, void* grad_input);

// Reductions and softmax over the middle dim of a contiguous (outer, n, inner) input, written to
// the contiguous (outer, inner) output (softmax: to (outer, n, inner)). Sums accumulate in the
// input's type (int64 for integers), in a different order from the CPU's.
const char* sum_middle(ScalarType type, int64_t outer, int64_t n, int64_t inner, const void* in, void* out);
// First index of the maximum, NaN counting as the maximum (the CPU loop's rule).
const char* argmax_middle(ScalarType type, int64_t outer, int64_t n, int64_t inner, const void* in, int64_t* out);
const char* softmax_middle(ScalarType type, bool log_output, int64_t outer, int64_t n, int64_t inner, const void* in, void* out);

// gather / scatter along `dim` over the index's positions (contiguous tensors, strides in
// elements). An index may be negative (counted from the end); the first out-of-range one seen is
// written to error[1] with error[0] = 1, and its element is skipped.
struct IndexGeometry {
  int ndim = 0, dim = 0;
  int64_t index_sizes[kMaxDims] = {};
  int64_t target_strides[kMaxDims] = {};  // of gather's input / scatter's output
  int64_t other_strides[kMaxDims] = {};   // of gather's output / scatter's src
  int64_t dim_size = 0;                   // the target's size along dim
};
const char* gather(ScalarType type, bool index64, const IndexGeometry& g, const void* input, const void* index, void* out,
                   int64_t* error);
// out already holds the input. Entries of one slice along dim are applied in order by one thread,
// so repeated indices resolve as on the CPU (the last write wins; additions in index order).
const char* scatter(ScalarType type, bool index64, bool add, const IndexGeometry& g, const void* src, const void* index,
                    void* out, int64_t* error);

struct SgdStep {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, buffer_initialized;
};
// The fused SGD update of core/kernels/cpu/optimizer_update.cpp; buffer may be null (no momentum).
const char* sgd_update(ScalarType type, int64_t numel, void* param, const void* grad, void* buffer, const SgdStep& step);

}  // namespace flow::cuda
