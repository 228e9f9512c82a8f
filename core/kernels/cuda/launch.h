#pragma once
// The boundary between host code (C++20, g++) and device code (.cu, nvcc): plain structs and
// launch functions only, so nvcc never parses the framework's headers.
#include <cstdint>

namespace flow::cuda {

constexpr int kMaxDims = 8;

enum class ScalarType : int { kFloat32, kFloat64, kInt64, kInt32, kUInt8, kInt8, kBool };

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
enum class BinaryOp : int { kAdd, kSub, kMul, kDiv, kMaximum, kMinimum, kPow, kRsub, kRdiv, kRpow };
enum class CompareOp : int { kEq, kNe, kLt, kLe, kGt, kGe };

// Each returns nullptr on success or the CUDA error string of the launch.
const char* unary(UnaryOp op, ScalarType type, const Geometry& g, int64_t numel, Operand out, Operand in);
const char* binary(BinaryOp op, ScalarType type, const Geometry& g, int64_t numel, Operand out, Operand a, Operand b);
const char* binary_scalar(BinaryOp op, ScalarType type, const Geometry& g, int64_t numel, Operand out, Operand a,
                          double scalar);
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

}  // namespace flow::cuda
