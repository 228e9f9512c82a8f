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

// A Scalar attribute as Scalar::to<T>() reads it: integer dtypes take `integer` (exact for any
// int64), floating ones `real` (16-bit ones through float).
struct ScalarArg {
  double real = 0;
  int64_t integer = 0;
};

// Element-wise ops with parameters or operand dtypes of their own (pointwise.cu), over geometries
// prepared as for unary/binary. sign: (0 < x) - (x < 0), so NaN gives 0 as on the CPU.
const char* sign(ScalarType type, const Geometry& g, int64_t numel, Operand out, Operand in);
// PyTorch's softplus: x where x * beta > threshold, else log1p(exp(x * beta)) / beta.
const char* softplus(ScalarType type, const Geometry& g, int64_t numel, Operand out, Operand in, double beta, double threshold);
// x < lo ? lo : (x > hi ? hi : x), a missing bound being the dtype's lowest / largest finite value
// (the CPU kernel's rule: NaN stays NaN).
const char* clamp(ScalarType type, const Geometry& g, int64_t numel, Operand out, Operand in, bool has_min, ScalarArg min,
                  bool has_max, ScalarArg max);
// grad * GELU'(input), erf or tanh form; 16-bit values compute in float and round once.
const char* gelu_grad(ScalarType type, bool tanh_form, const Geometry& g, int64_t numel, Operand out, Operand grad, Operand input);
enum class LogicalOp : int { kAnd, kOr, kXor };
// Bool operands, bool output.
const char* logical(LogicalOp op, const Geometry& g, int64_t numel, Operand out, Operand a, Operand b);
// out (bool) = input == 0, any dtype.
const char* logical_not(ScalarType type, const Geometry& g, int64_t numel, Operand out, Operand in);
// out = mask (bool) ? value : input.
const char* masked_fill(ScalarType type, const Geometry& g, int64_t numel, Operand out, Operand input, Operand mask, ScalarArg value);

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
// the contiguous (outer, inner) output (softmax, cumsum: to (outer, n, inner)). Sums and products
// accumulate in the input's type (int64 for integers, wrapping), in a different order from the
// CPU's; max and min give NaN when a NaN is among the values, as the CPU does.
enum class ReduceOp : int { kSum, kProd, kMax, kMin };
const char* reduce_middle(ReduceOp op, ScalarType type, int64_t outer, int64_t n, int64_t inner, const void* in, void* out);
// First index of the maximum (minimum), NaN counting as the extremum (the CPU loop's rule); the
// values at those indices too where `values` is not null (max_dim, min_dim).
const char* extremum_index_middle(bool is_max, ScalarType type, int64_t outer, int64_t n, int64_t inner, const void* in, int64_t* out,
                                  void* values);
// Running sums along n (from the end when reverse), in the CPU's order and accumulator types.
const char* cumsum_middle(ScalarType type, bool reverse, int64_t outer, int64_t n, int64_t inner, const void* in, void* out);
const char* softmax_middle(ScalarType type, bool log_output, int64_t outer, int64_t n, int64_t inner, const void* in, void* out);

// Layer norm over a contiguous (rows, features) input (norm.cu): mean and rstd = 1 / sqrt(var +
// eps) per row from two passes in the input's type; weight and bias are both null or both given.
const char* layer_norm(ScalarType type, int64_t rows, int64_t features, double eps, const void* x, const void* weight, const void* bias,
                       void* y, void* mean, void* rstd);
// Its gradients: dx per row (weight may be null), and grad_weight[f] = sum over rows of dy * xhat,
// grad_bias[f] = sum of dy (written, zeros for no rows, whether or not the forward was affine).
const char* layer_norm_grad(ScalarType type, int64_t rows, int64_t features, const void* dy, const void* x, const void* mean,
                            const void* rstd, const void* weight, void* dx, void* grad_weight, void* grad_bias);
// softmax's (log_softmax's) input gradient from the output's gradient and the output, over the
// middle dim of contiguous (outer, n, inner) tensors of one dtype.
const char* softmax_grad_middle(ScalarType type, bool log_output, int64_t outer, int64_t n, int64_t inner, const void* grad,
                                const void* out, void* grad_input);

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

// Kernels placing elements by position (index.cu), over contiguous tensors; `item` is the element
// size in bytes (they move elements without reading them as values). An out-of-range index or
// class is recorded as gather's are (error[0] = 1, error[1] = the value) and its element skipped.
// index_select: out (outer, n, inner) from input (outer, size, inner) at index's n positions
// (negative ones counted from the end).
const char* index_select(int item, bool index64, int64_t outer, int64_t size, int64_t inner, int64_t n, const void* input,
                         const void* index, void* out, int64_t* error);
// Writes the ones of a zeroed (numel, classes) output.
const char* one_hot(int64_t numel, int64_t classes, const int64_t* indices, int64_t* out, int64_t* error);
// tril (lower) or triu of every (rows, cols) matrix of `numel` elements.
const char* triangular(bool lower, int item, int64_t numel, int64_t rows, int64_t cols, int64_t diagonal, const void* in, void* out);
const char* eye(ScalarType type, int64_t rows, int64_t cols, void* out);
const char* linspace(ScalarType type, int64_t steps, double start, double end, void* out);

// Scaled dot-product attention (attention.cu): `batch` problems of query (L, E), key (S, E) and
// value (S, Ev), each problem's matrices contiguous (rows E or Ev apart) and found through the
// batch layout; the outputs (out, logsumexp) and the gradients are contiguous.
struct AttentionBatch {
  int ndim = 0;  // batch dims
  int64_t sizes[kMaxDims] = {};
  // Strides in elements per batch dim; the mask's are 0 along the dims it broadcasts.
  int64_t query[kMaxDims] = {}, key[kMaxDims] = {}, value[kMaxDims] = {}, mask[kMaxDims] = {};
};
struct AttentionProblem {
  int64_t batch = 1, l = 0, s = 0, e = 0, ev = 0;
  double scale = 1;
  bool causal = false;  // query row i sees keys 0..i
  int64_t mask_row_stride = 0, mask_col_stride = 0;  // of the optional additive mask
  // Weight (b, i, j) is element (b * L + i) * S + j, read as word element % 4 of Philox counter
  // offset + element / 4 (the CPU kernel's Dropout); p = 0: no dropout.
  double dropout_p = 0;
};
// Online softmax per query row: out = softmax(scale * q k^T + mask) v (the kept weights scaled
// by 1 / (1 - p) under dropout), logsumexp (float32 for 16-bit inputs) of each row's scores (-inf,
// and zeros out, for a row that sees no key); writes (seed, offset) to rng_state.
const char* attention_forward(ScalarType type, const AttentionProblem& p, const AttentionBatch& layout, const void* query, const void* key,
                              const void* value, const void* mask, void* out, void* logsumexp, int64_t* rng_state, uint64_t seed,
                              uint64_t offset);
// Its gradients, recomputing each weight from the saved logsumexp; (seed, offset) are read from
// the forward's rng_state. row_dot is a workspace of batch * L values of logsumexp's dtype.
const char* attention_backward(ScalarType type, const AttentionProblem& p, const AttentionBatch& layout, const void* grad_out,
                               const void* query, const void* key, const void* value, const void* out, const void* logsumexp,
                               const int64_t* rng_state, const void* mask, void* row_dot, void* grad_query, void* grad_key,
                               void* grad_value);

// Random fills of contiguous outputs (random.cu): element i from Philox counter offset + i with
// the CPU kernels' formulas (core/kernels/cpu/creation.cpp), so uniform and randint give the CPU's
// values exactly and normal up to the last bits of the device's log and cos. uniform and normal
// take float32 and float64, randint the numeric dtypes.
const char* random_uniform(ScalarType type, int64_t numel, void* out, double low, double high, uint64_t seed, uint64_t offset);
const char* random_normal(ScalarType type, int64_t numel, void* out, double mean, double std, uint64_t seed, uint64_t offset);
const char* random_int(ScalarType type, int64_t numel, void* out, int64_t low, uint64_t range, uint64_t seed, uint64_t offset);

// sort and topk (sorting.cu) of the contiguous (outer, n, inner) input along its middle dim: the
// first k positions of each line in the CPU's strict order (largest first when descending, NaN
// above every number, equal values in position order), their values and int64 positions written
// to the contiguous (outer, k, inner) outputs. Numeric dtypes.
const char* sort_lines(ScalarType type, int64_t outer, int64_t n, int64_t inner, int64_t k, bool descending, const void* in, void* values,
                       int64_t* indices);
// multinomial over contiguous (rows, categories) float32/float64 weights (sorting.cu), the CPU
// kernel's draws (core/kernels/cpu/sorting.cpp): with replacement, sample s of row r inverts the
// row's cumulative weights (summed in order, in double) at the uniform of Philox counter offset + r
// * num_samples + s; without, the num_samples largest keys w_c / -log(u_c + 2^-54), u_c from counter
// offset + r * categories + c, in order (ties to the lower category). workspace holds rows *
// categories doubles. The weights are checked as the CPU checks them, per entry where
// per_entry_checks: error[0] = 1 and error[1] = ((rows - r) << 3) | failure for the first failing row r.
enum class MultinomialFailure : int { kNone, kNotFiniteOrNegative, kNegativeEntry, kNonFiniteEntry, kNoPositiveWeight };
const char* multinomial(ScalarType type, int64_t rows, int64_t categories, int64_t num_samples, bool replacement, bool per_entry_checks,
                        uint64_t seed, uint64_t offset, const void* weights, double* workspace, int64_t* out, int64_t* error);
// binary_cross_entropy of contiguous input and target (pointwise.cu): (target - 1) *
// max(log1p(-input), -100) - target * max(log(input), -100); an input outside [0, 1] (or NaN)
// sets error[0] = 1. Floating dtypes, 16-bit ones computed in float.
const char* binary_cross_entropy(ScalarType type, int64_t numel, const void* input, const void* target, void* out, int64_t* error);

// fused_elementwise (fused.cu): a program of core/ops/fused.h, decoded on the host, interpreted
// per output element in the compute type (float, double for float64 programs). Its table travels
// as the kernel's parameter (read through the constant cache, the same step for every thread), so
// it has fixed capacities; the host refuses larger programs.
constexpr int kMaxFusedSteps = 64, kMaxFusedOperands = 32, kMaxFusedOutputs = 8;
// The ops from kAdd to kGeluGrad take two arguments, kWhere three, the others one.
enum class FusedCode : uint8_t {
  kNeg, kAbs, kSign, kExp, kLog, kSqrt, kRsqrt, kSin, kCos, kTanh, kSigmoid, kRelu, kSilu, kGelu, kClamp,
  kAddScalar, kSubScalar, kRsubScalar, kMulScalar, kDivScalar, kRdivScalar, kPowScalar, kRpowScalar,
  kAdd, kSub, kMul, kDiv, kPow, kMaximum, kMinimum, kReluGrad, kGeluGrad, kWhere, kCopy,
};
struct FusedStep {
  FusedCode code = FusedCode::kCopy;
  bool tanh_form = false;   // gelu, gelu_grad
  int16_t args[3] = {};     // an operand (>= 0) or step s's value (-(s + 1))
  double scalar = 0;        // the *_scalar ops' constant
  double lo = 0, hi = 0;    // clamp's bounds, a missing one being the compute type's lowest / largest
};
// Operand element for output element i: (i / inner) % size of contiguous data of `type` (float16
// and bfloat16 widened exactly, bool read as 0 or 1).
struct FusedOperand {
  const void* data = nullptr;
  ScalarType type = ScalarType::kFloat32;
  int64_t inner = 1, size = 1;
};
// A contiguous output of the program's shape holding step `step`'s value, rounded to `type` when
// that is float16/bfloat16.
struct FusedOutput {
  void* data = nullptr;
  ScalarType type = ScalarType::kFloat32;
  int step = 0;
};
struct FusedProgram {
  int num_steps = 0, num_operands = 0, num_outputs = 0;
  FusedStep steps[kMaxFusedSteps];
  FusedOperand operands[kMaxFusedOperands];
  FusedOutput outputs[kMaxFusedOutputs];
};
// compute: kFloat32 or kFloat64. Every output element reads its operands before any output
// element is written, so an operand may be an output's memory (the in-place form).
const char* fused_elementwise(ScalarType compute, const FusedProgram& program, int64_t numel);

// Sparse softmax cross-entropy (cross_entropy.cu) over contiguous (rows, classes) logits of
// `type` and int64 labels, one block per row: log_softmax's statistics in the statistics type
// (float, double for float64): max (NaN skipped, 0 when infinite) and log of the sum of exp(x -
// max) (summed in double), and loss = -((x[label] - max) - log_sum_exp) written as loss_type, 0
// where label == ignore_index. A label outside [0, classes) that is not ignore_index sets error[0]
// = 1 (its row's loss is not computed).
const char* sparse_cross_entropy(ScalarType type, ScalarType loss_type, int64_t rows, int64_t classes, int64_t ignore_index,
                                 const void* logits, const int64_t* labels, void* loss, void* max, void* log_sum_exp, int64_t* error);
// grad_logits = (softmax - one_hot(label)) * grad[row] from the saved statistics, in the CPU's
// operations (exp((x - max) - log_sum_exp) * s, and -s - p * (-s) at the label), zero on ignored
// rows; grad of grad_type. Labels are checked as in the forward.
const char* sparse_cross_entropy_grad(ScalarType type, ScalarType grad_type, int64_t rows, int64_t classes, int64_t ignore_index,
                                      const void* grad, const void* logits, const int64_t* labels, const void* max,
                                      const void* log_sum_exp, void* grad_logits, int64_t* error);

struct SgdStep {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, buffer_initialized;
};
// The fused SGD update of core/kernels/cpu/optimizer_update.cpp; buffer may be null (no momentum).
const char* sgd_update(ScalarType type, int64_t numel, void* param, const void* grad, void* buffer, const SgdStep& step);

}  // namespace flow::cuda
