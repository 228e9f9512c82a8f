#pragma once
// fused_elementwise: a chain of element-wise ops evaluated in one pass over its output, tile by
// tile, so intermediate values stay in cache and the chain costs one op call. The Graph
// compiler's fusion pass builds these; the kernel uses the same scalar functions as the single
// ops, so results are bit-identical to the unfused chain. The CUDA kernel (core/kernels/cuda/
// fused.cu) follows the CPU's formulas, which CUDA's single kernels do not all share (maximum and
// minimum with a NaN second argument, pow computed in double): there a fused chain can differ from
// the unfused one in those cases and in the last bits.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/op.h"

namespace flow::fused {

// One step of a program: `op` (a registered element-wise op) applied to `args`, each an operand
// index (>= 0) or a previous step's result (-(step + 1)), with that op's attributes.
struct Step {
  std::string op;
  std::vector<int> args;
  Attrs attrs;
};

struct Program {
  std::vector<Step> steps;
  std::vector<int> outputs;  // the steps whose results are the op's outputs, in order
};

inline int step_arg(int step) { return -(step + 1); }

// Whether the fused kernel can evaluate `op`: float32/float64 element-wise ops of one dtype, and
// `copy` as a conversion to the program's dtype (a float32 program reads float16/bfloat16
// operands through it, widened as they are loaded) or, with a "dtype" attribute naming float16 or
// bfloat16, as the rounding of a float32 program's value into an output of that dtype (no step
// reads it; it rounds as the copy op does).
bool can_fuse(const std::string& op);

// How an operand broadcasts onto the output: output element i reads operand element
// (i / inner) % size. That covers the same shape, a single value, trailing dims (a bias (C) of
// (N, C)), leading dims ((N, 1) of (N, C)) and a middle block ((C, 1, 1) of (N, C, H, W)); other
// broadcasts (none) are not fused.
struct OperandLayout {
  int64_t inner = 1;
  int64_t size = 1;
};
std::optional<OperandLayout> operand_layout(const Shape& operand, const Shape& out);

// The program as the op's "program" attribute and back.
std::string encode(const Program& program);
Program decode(const std::string& text);

// `program` without its conversions of operands (copy steps without a "dtype") for which
// `strip(operand)` holds: the steps that read one read the operand itself. A conversion that is
// one of the program's outputs stays. For callers whose operands are already of the program's
// dtype, or who convert them as they load them.
Program without_conversions(const Program& program, const std::function<bool(int operand)>& strip);

// Op "fused_linear" (made by the Graph's fusion pass, no functional entry point): linear(x, w[, b])
// with an element-wise program as its epilogue. Its inputs are the linear's (attr
// "linear_inputs": 2 or 3 of them) then the program's operands 1..n; operand 0 is the linear's
// result, which is never written to memory on its own.

// Runs `program` over `operands`; every output has shape `shape`.
TensorList fused_elementwise(const TensorList& operands, const Program& program, const Shape& shape);
// The in-place form (op "fused_elementwise_inplace"): output i is written into destinations[i]
// (contiguous, of the output shape). An operand may be a destination: each tile reads it before
// any step writes it.
void fused_elementwise_(const TensorList& destinations, const TensorList& operands, const Program& program);

}  // namespace flow::fused
