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

}  // namespace flow::cuda
