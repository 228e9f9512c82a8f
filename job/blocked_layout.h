#pragma once
// The CPU layout pass of oneflow_lite and of the Graph's frozen inference plans
// (graph/frozen_inference.h): on CPU, float32 convolutions, pooling, ReLU and residual adds
// (relu(a + b), the fusion pass's fused_elementwise) run on the channel-blocked layouts the
// convolutions choose (nChw8c with AVX2, channels-last NHWC with AVX-512), as oneDNN primitives or
// flow's loops (max pooling, residual adds: in place, their ReLU in the same pass), and their
// results stay in those layouts from one such op to the next. A value crosses to flow's plain NCHW
// only where another op or a model output reads it. Convolution weights are reordered once, when
// the program for a batch size is built (ReorderedWeights shares the copies between programs), and
// a ReLU or a clamp keeping 0 (ReLU6) that alone reads a convolution's result runs in place right
// after it (flow's loops, which keep NaN; oneDNN's ReLU and clip post-ops would not), or as
// oneDNN's post-op where no NaN can reach it (plan's checked_input_bound).
// On AVX2, convolutions from nChw8c to nChw8c run flow's direct convolution (cpu/conv_blocked.h)
// instead of oneDNN's primitive, the ReLU and a folded residual sum inside it. On AVX-512 a
// network's first convolution on a model input (1-4 channels), its ReLU and a 2x2 max pooling run
// as one pass (cpu/conv_shallow_pool.h) that writes only the pooled result, channels-last.
// An AMP export's bfloat16 convolutions (AVX-512) run there too, on bfloat16 weights reordered
// once: the casts around them are reorders within a layout, or no step where the convolution
// writes the dtype its readers take (float32 unrounded, or bfloat16 where only casts back to
// bfloat16 or bfloat16 convolutions read it). A bfloat16 first layer on a model input's cast runs
// as the float32 one-pass convolution, ReLU and pooling above, on the input itself.
// ONNX Runtime's NCHWc transformer does the same for its CPU provider; without it every conv and
// pool reorders its input, output and weights on each call. Linears on constant weights (with the
// fusion pass's ReLU) run on weights packed once: oneDNN's matmul for 2+ rows with AVX-512, flow's
// product (cpu/linear_packed.h) for 2-32 rows elsewhere; their results plain row-major.
#include <cstdint>
#include <memory>
#include <vector>

#include "core/op.h"

namespace flow::graph {

// One step of a program as the pass sees it: op, attributes, value ids read and written.
struct LayoutStep {
  const OpDef* op = nullptr;
  const Attrs* attrs = nullptr;
  const std::vector<int>* inputs = nullptr;
  const std::vector<int>* outputs = nullptr;
};

// The memory one run in flight holds for the blocked values (allocated once per arena).
class BlockedArena;
struct BlockedArenaDeleter {
  void operator()(BlockedArena* arena) const;
};
using BlockedArenaPtr = std::unique_ptr<BlockedArena, BlockedArenaDeleter>;

// The bound oneflow_lite and frozen Graph inference plan with (BlockedLayouts::plan): model inputs
// finite and at most this large take the blocked steps; images, token embeddings and features are
// orders of magnitude below it.
inline constexpr double kCheckedInputBound = 1e6;

// Constant weights reordered into the layouts oneDNN's primitives want, shared by the plans made
// with it: oneflow_lite plans once per batch size and kernel thread count, and those plans'
// convolutions want the same layouts of the same weights (resnet50: ~100 MB a copy). A copy lives
// while a plan uses it. Only for weights that do not change while a plan made with it lives.
// Thread-safe.
class ReorderedWeights {
 public:
  struct Impl;
  ReorderedWeights();
  ~ReorderedWeights();
  ReorderedWeights(const ReorderedWeights&) = delete;
  ReorderedWeights& operator=(const ReorderedWeights&) = delete;
  // The bytes of the copies plans use now.
  int64_t bytes() const;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

class BlockedLayouts {
 public:
  struct Impl;
  // Chooses the steps that run on blocked layouts and builds their primitives. `metas` and
  // `constants` (the weights) are by value id; `model_outputs` lists the values the model returns.
  // Steps oneDNN cannot serve (a primitive it will not create) stay with their op's kernel.
  // Primitives use the calling thread's kernel threads (current_num_threads()) from then on.
  //
  // With `checked_input_bound` > 0 the caller runs the blocked steps only on model inputs whose
  // values are all finite and at most that large (accepts), and otherwise every step
  // through its op's kernel. A convolution whose pre-activation then provably stays finite (bounds
  // carried from the inputs through the weights, ReLU, clamps, pooling and adds) applies its ReLU
  // or clamp as oneDNN's post-op: no NaN can reach it, the one value where oneDNN's post-ops and
  // flow's loops differ, and the separate pass over its result is saved (mobilenet_v2's ReLU6:
  // 10-12% of a run).
  //
  // With `shared`, weights are reordered through it (a copy another plan made is reused);
  // without, this plan makes its own.
  static std::shared_ptr<const BlockedLayouts> plan(const std::vector<LayoutStep>& steps, const std::vector<TensorMeta>& metas,
                                                    const std::vector<std::pair<int, Tensor>>& constants, const std::vector<int>& model_outputs,
                                                    double checked_input_bound = 0, ReorderedWeights* shared = nullptr);
  ~BlockedLayouts();

  // Whether a run on `inputs` may take the blocked steps: always, unless some convolution applies
  // its activation as a post-op or is a bfloat16 one of an odd input channel count, whose proofs
  // need every floating input finite and at most the plan's checked_input_bound in magnitude.
  // Otherwise the caller runs every step through its op's kernel.
  bool accepts(const TensorList& inputs) const;
  // How many convolutions apply their ReLU or clamp as oneDNN's post-op.
  int64_t activations_in_primitives() const;

  // Whether step `s` runs here instead of through its op's kernel.
  bool runs(size_t s) const;
  // How many steps run here.
  int64_t blocked_steps() const;
  // The values that exist only in blocked memory: no op kernel or model output reads them, so
  // they need no plain buffer.
  std::vector<int> blocked_only_values() const;
  // The bytes one arena allocates for blocked values and operand reorders.
  int64_t arena_bytes() const;
  BlockedArenaPtr make_arena() const;
  // Runs step `s`: plain inputs are read from `values`, blocked ones from `arena`. When an op's
  // kernel or a model output reads the result, it is also written to `plain_output` (the
  // planned tensor, or a new one when undefined) and stored in `values`.
  void run(size_t s, BlockedArena& arena, TensorList& values, const Tensor& plain_output) const;

 private:
  explicit BlockedLayouts(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace flow::graph
