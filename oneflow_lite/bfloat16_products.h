#pragma once
// oneflow_lite's choice, at load, of the precision an AMP export's bfloat16 products run in on
// this CPU. An AMP export computes its convolutions and matmuls in bfloat16 because that is
// faster where the CPU multiplies bfloat16 in hardware, but how much hardware differs by op kind:
// with AVX512-BF16 (dot products) and no AMX (tiles), as on AMD Zen 4, oneDNN's bfloat16 matmuls
// take about half the float32 time while its bfloat16 convolutions take 1.2-4.5x the float32 time
// (docs/performance.md). So the choice is per op kind: a product whose bfloat16 kernel is slower
// here runs in float32 on weights widened once at load, and so do the ops around it that only
// pass its result on (ReLU, pooling, views, residual adds), so that values are not cast back and
// forth between them; a cast to bfloat16 goes where a kept bfloat16 op (or a model output) reads
// a widened value.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/op.h"
#include "core/tensor.h"
#include "job/job.pb.h"
#include "oneflow_lite/model.h"

namespace flow::lite {

// What this CPU offers for bfloat16 products, as oneDNN sees it (ONEDNN_MAX_CPU_ISA lowers it).
struct Bfloat16Hardware {
  bool dot_products = false;  // AVX512-BF16 (vdpbf16ps): Cooper Lake, Sapphire Rapids, AMD Zen 4
  bool matrix_tiles = false;  // AMX-BF16: Sapphire Rapids and later Xeons
};
Bfloat16Hardware cpu_bfloat16_hardware();

// A bfloat16 product node as the decision sees it: its op, input metas (x, weight[, bias]) and
// attributes.
struct Bfloat16Product {
  std::string op;
  std::vector<TensorMeta> inputs;
  Attrs attrs;
};

// Below this many weights (K x N) a bfloat16 matmul or linear is slower than the float32 one even
// with AVX512-BF16: oneDNN's call costs more than the product saves. Measured on Zen 4, one row:
// the ResNet-style net's 16 -> 10 linear 1.2 us slower in bfloat16; 128 -> 10 (1280) even,
// 512 -> 10 (5120) faster at 64 rows (docs/performance.md, 2026-11-28).
inline constexpr int64_t kMinBfloat16ProductWeights = 1024;

// Convolutions with AVX512-BF16 and no AMX, off the layout pass (LoadOptions::blocked_layouts(
// false): each runs through its op's kernel, reordering its operands on every call), measured one
// by one at batch 1 in resnet18, resnet50 and mobilenet_v2 against float32 (docs/performance.md,
// 2026-11-28): depthwise ones take 2-4x the float32 time; 1x1 ones with under 256 input or 128
// output channels 1.1-2.9x; any on fewer than 14x14 output pixels 0.95-1.4x (and the CNN's
// 32 -> 64 3x3 on 11x11 1.27x); the 3x3 ones of 64-256 channels on 14x14 and more 0.6-0.77x, and
// 1x1 ones of 256+ to 128+ channels there 0.75-0.93x. There a convolution stays bfloat16 only
// with groups 1, at least kMinBfloat16ConvReduction multiply-adds per output (input channels x
// window), kMinBfloat16ConvPixels output pixels per image, and, for a 1x1 window,
// kMinBfloat16PointwiseChannels output channels.
// On the layout pass (job/blocked_layout.h) every bfloat16 convolution runs as oneDNN's primitive
// on blocked layouts, its casts reorders within them or no step, and the whole export kept in
// bfloat16 ran faster than any mix on Zen 5: resnet18, resnet50 and mobilenet_v2 at batch 1 and 8,
// 1 and 2 threads, 0.52-0.70 of the float32 export's time (docs/performance.md, "bfloat16
// convolutions on the layout pass"). A first layer that the pass runs with its ReLU and max
// pooling as one pass of flow's float32 kernel (cpu::ShallowConvPool) runs so in bfloat16 exports
// too, on the model input as it is and the weights widened.
inline constexpr int64_t kMinBfloat16ConvReduction = 256;
inline constexpr int64_t kMinBfloat16ConvPixels = 14 * 14;
inline constexpr int64_t kMinBfloat16PointwiseChannels = 128;

// Whether `product` runs faster in bfloat16 than in float32 on a CPU with `hardware`, on the layout
// pass or (`on_blocked_layouts` false) through the ops' kernels. Matmuls and linears: with
// AVX512-BF16 and kMinBfloat16ProductWeights. Convolutions: with AMX (not measured here: oneDNN's
// AMX kernels are its fastest), with AVX512-BF16 on the layout pass, or with AVX512-BF16 off it
// on the shapes above. Other ops are not products lite widens: true (kept as exported).
bool bfloat16_pays_off(const Bfloat16Product& product, Bfloat16Hardware hardware, bool on_blocked_layouts);

// The choice in force: `option` unless it is kAuto and the environment variable
// FLOW_LITE_BFLOAT16 (`env`, null when unset) says "keep" or "float32" ("auto" leaves kAuto).
// Throws flow::Error for another value.
Bfloat16Products bfloat16_choice(Bfloat16Products option, const char* env);

// Whether to run a bfloat16 product node in float32.
using WidenFn = std::function<bool(const Bfloat16Product& product)>;

// Rewrites `job` so that every bfloat16 CPU product node for which widen(product) holds, and each
// node after it that only passes widened values on, computes in float32: bfloat16 constants they
// read get float32 copies (added to `weights`, keyed by their new constant nodes), a cast to
// bfloat16 feeding them is bypassed (its float32 source is read: one rounding less), a cast to
// float32 of their result disappears, and a cast back to bfloat16 is inserted for every other
// reader (kept products, model outputs), so that the model's inputs and outputs keep their
// dtypes. Casts and constants nothing reads any more are removed. Returns how many product
// nodes of each op now run in float32.
std::map<std::string, int64_t> widen_bfloat16_products(graph::proto::Job& job, std::map<std::string, Tensor>& weights,
                                                       const WidenFn& widen);

}  // namespace flow::lite
