#pragma once
// The layout pass's per-step kernels as planned (job/blocked_layout.cpp) and run
// (job/blocked_layout_run.cpp). Used by those two files alone.
#include <optional>
#include <vector>

#include "core/kernels/cpu/conv_blocked.h"
#include "core/kernels/cpu/conv_shallow_pool.h"
#include "core/kernels/cpu/dnnl_util.h"
#include "core/kernels/cpu/linear_packed.h"
#include "core/kernels/cpu/pool_loop.h"
#include "job/blocked_layout.h"
#include "job/blocked_layout_steps.h"

namespace flow::graph {
namespace blocked_kernels {

using namespace blocked_steps;
using namespace cpu::dnnl_util;
using Pair = std::vector<int64_t>;

// kShallowConvPool: a first-layer convolution (+ ReLU) + 2x2 max pooling as one pass; the
// convolution's and ReLU's steps become kComputedLater (no memory, nothing to run).
// kConvert: a cast between float32 and bfloat16 within one layout.
enum class Kind {
  kConv, kDirectConv, kPackedLinear, kMatmul, kPool, kMaxPool, kShallowConvPool, kRelu, kAdd, kConvert, kAlias, kComputedLater
};

// Where a primitive reads one input: a blocked value's memory or a plain tensor, reordered into
// the primitive's layout when the two differ.
struct Operand {
  int value = -1;
  bool blocked = false;
  memory::desc layout;  // the value's layout
  memory::desc wanted;  // the primitive's
  std::optional<dnnl::reorder> reorder;
  int scratch = -1;  // the arena buffer the reorder writes
};

struct Kernel {
  Kind kind = Kind::kAlias;
  std::optional<dnnl::primitive> primitive;
  // Convolution: what the primitive was made from, to remake it with a sum post-op (sum_into).
  std::optional<dnnl::convolution_forward::desc> conv_desc;
  std::vector<Operand> operands;
  // oneDNN's convolution: the weights reordered once (unless already in the primitive's layout)
  // and the bias as exported; the tensors and the reordered block keep the buffers those point
  // into alive.
  memory weights, bias;
  Tensor weight_values, bias_values;
  std::shared_ptr<Storage> reordered_weights;
  int output = -1;
  TensorMeta out_meta;
  memory::desc out_layout;
  bool plain_needed = false;  // an op's kernel or a model output reads the result
  std::optional<dnnl::reorder> to_plain;
  // Max pooling runs flow's loop over the channel blocks (cpu/pool_loop.h), not oneDNN's: oneDNN
  // skips NaN and gives the lowest finite value for a window of -inf where flow propagates NaN
  // and keeps -inf, and it measured 7x slower here.
  cpu::PoolGeometry pool{};
  cpu::BlockedPlanes planes{};  // nChw<block>c, or NHWC (oneDNN's choice with AVX-512)
  int block = 0;
  // Convolutions from nChw8c to nChw8c on AVX2 run flow's direct convolution (cpu/conv_blocked.h),
  // which applies the ReLU after and the residual sum itself.
  std::optional<cpu::BlockedConv> direct_conv;
  // A network's first convolution, its ReLU (relu_after) and a 2x2 max pooling on AVX-512
  // (cpu/conv_shallow_pool.h), from the plain NCHW input to the pooled result channels-last.
  std::optional<cpu::ShallowConvPool> shallow_conv_pool;
  // Linears of a few rows on constant weights: flow's product on the weights packed once
  // (cpu/linear_packed.h), the ReLU after in it; plain row-major in and out.
  std::optional<cpu::PackedLinear> packed_linear;
  // Too little work to be worth a fork-join: created and run on the calling thread alone.
  bool single_thread = false;
  // Convolution, linear, residual add, max pooling: the ReLU that alone reads the result (or the
  // fused add's, or the one moved from before the pooling), applied in place by flow's own loop
  // right after the primitive (by the kernel itself for flow's convolution and linear and for the
  // residual add, which is flow's loop relu(a + b)). Not a
  // oneDNN post-op: oneDNN 2.6's ReLU (max(x, 0) in its JIT code) turns NaN into 0, where flow's
  // relu, like PyTorch's, keeps it.
  bool relu_after = false;
  // Convolution: the clamp (ReLU6) that alone reads the result, applied in place by flow's loop
  // right after it, for the same reason (oneDNN's clip post-op turns NaN into the lower bound).
  std::optional<ClampBounds> clamp_after;
  // Convolution: its relu_after or clamp_after is oneDNN's post-op, not a pass of flow's loop (the
  // plan proved that no NaN reaches it from any inputs BlockedLayouts::accepts()).
  bool activation_in_primitive = false;
  // Convolution: a bfloat16 one with an odd count of input channels per group, correct only on
  // finite inputs (the plan proved that none other reaches it from inputs accepts()).
  bool needs_finite_input = false;
  // Convolution: the value whose buffer the result is added onto and written to (a residual add
  // folded into the convolution as oneDNN's sum post-op); -1 for none.
  int sum_into = -1;
  // Convolution: oneDNN's pointwise implementation (brgconv_1x1), whose sum post-op costs more than
  // the separate residual add it saves, so none is folded into it (sum_into_convolution).
  bool sum_post_op_slower = false;
};

inline Dims dims_of(const Shape& shape) { return Dims(shape.begin(), shape.end()); }

// The 4-d layout nChw<block>c (block 1: plain NCHW).
inline memory::desc channel_blocked(const Dims& dims, int block) {
  const auto tag = block == 1 ? memory::format_tag::abcd : block == 8 ? memory::format_tag::aBcd8b : memory::format_tag::aBcd16b;
  return memory::desc(dims, memory::data_type::f32, tag);
}

// `layout` with elements of `type`: the same dims, order and blocking.
inline memory::desc with_data_type(const memory::desc& layout, memory::data_type type) {
  dnnl_memory_desc_t data = layout.data;
  data.data_type = static_cast<dnnl_data_type_t>(type);
  return memory::desc(data);
}

// The 4-d layout NHWC, which oneDNN's convolutions choose on AVX-512.
inline memory::desc channels_last_layout(const Dims& dims) { return memory::desc(dims, memory::data_type::f32, memory::format_tag::acdb); }

// The channel block of a 4-d layout nChw<block>c (1: plain NCHW); 0 for any other layout.
inline int channel_block(const memory::desc& layout) {
  for (int block : {1, 8, 16}) {
    if (layout == channel_blocked(layout.dims(), block)) return block;
  }
  return 0;
}

// The plain layout of a value (NCHW for 4-d), in its dtype.
inline memory::desc plain_of(const TensorMeta& meta) { return plain(dims_of(meta.shape), data_type_of(meta.dtype).value_or(memory::data_type::f32)); }

// A plain operand as the primitive reads it: a value an op's kernel made may be a strided view.
inline Tensor& contiguous(Tensor& value) {
  if (!value.is_contiguous()) value = value.contiguous();
  return value;
}

}  // namespace blocked_kernels

struct BlockedLayouts::Impl {
  std::vector<std::unique_ptr<blocked_kernels::Kernel>> kernels;  // by step; null: the op's kernel runs it
  std::vector<TensorMeta> metas;  // by value
  std::vector<int> slot_of;       // by value: its arena buffer, -1 when plain
  std::vector<size_t> slot_bytes;
  std::vector<size_t> scratch_bytes;
  int64_t blocked_steps = 0;
  double input_bound = 0;  // the plan's checked_input_bound where accepts() needs it, else 0
  int64_t activations_in_primitives = 0;
};

class BlockedArena {
 public:
  std::vector<dnnl::memory> slots;
  std::vector<dnnl::memory> values;  // by value id; blocked values only
  std::vector<dnnl::memory> scratch;
};

}  // namespace flow::graph
