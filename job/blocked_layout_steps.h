#pragma once
// Which steps of a program the CPU layout pass (job/blocked_layout.h) can take over: the matchers
// for residual adds, clamps a convolution applies itself, linears on packed weights, and the
// size below which a step runs on one thread. Used by job/blocked_layout.cpp alone.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/kernels/cpu/dnnl_util.h"
#include "core/kernels/cpu/linear_packed.h"
#include "core/op.h"
#include "core/ops/fused.h"
#include "core/thread_pool.h"

namespace flow::graph::blocked_steps {

using cpu::dnnl_util::has_avx512_core;

// A clamp's bounds (-inf or inf where it has none).
struct ClampBounds {
  float lo, hi;
};

// Below these, splitting a step over threads costs more than it saves (and under machine load a
// descheduled team member stalls the barrier): multiply-adds of a convolution or linear, elements
// otherwise. 2^18 measured best of 2^16-2^20 at 2 threads (ResNet-style batch 8: 0.25 -> 0.18 ms
// from 2^20; batches 1-2 of the CNN and ResNet unchanged).
constexpr int64_t kParallelConvMacs = int64_t{1} << 18;
constexpr int64_t kParallelElements = kElementwiseGrain;

// Whether a step is too small to split over threads (kParallelConvMacs, kParallelElements).
inline bool is_small(const std::string& op, const std::vector<TensorMeta>& in, const TensorMeta& out) {
  if (op == "conv2d") {
    const Shape& w = in[1].shape;
    return out.shape.numel() * w[1] * w[2] * w[3] < kParallelConvMacs;
  }
  if (op == "linear" || op == "fused_linear") return out.shape.numel() * in[1].shape[1] < kParallelConvMacs;
  return std::max(in.empty() ? 0 : in[0].shape.numel(), out.shape.numel()) < kParallelElements;
}

// A 4-d tensor of `dtype` with elements on the CPU.
inline bool is_cpu_4d(const TensorMeta& meta, DType dtype) {
  return meta.dtype == dtype && meta.device.type == DeviceType::kCPU && meta.shape.size() == 4 && meta.shape.numel() > 0;
}

// A float32 4-d tensor with elements on the CPU: what the blocked convolutions and poolings take.
inline bool is_cpu_float_4d(const TensorMeta& meta) { return is_cpu_4d(meta, kFloat32); }

// Whether a step is a residual add: an add of two float32 operands, or a fused_elementwise program
// a + b or relu(a + b) of two float32 or bfloat16 operands (the program converts the latter as it
// loads them: an AMP export's sum of a bfloat16 convolution's result), of the result's shape, into
// float32. Returns whether a ReLU follows the sum.
inline std::optional<bool> residual_add(const std::string& name, const Attrs& attrs, const std::vector<TensorMeta>& in, const TensorMeta& out) {
  if ((name != "add" && name != "fused_elementwise") || in.size() != 2 || out.dtype != kFloat32) return std::nullopt;
  for (const TensorMeta& meta : in) {
    const bool converted = name == "fused_elementwise" && is_cpu_4d(meta, kBFloat16);
    if (!(is_cpu_float_4d(meta) || converted) || !(meta.shape == out.shape)) return std::nullopt;
  }
  if (name == "add") return false;
  if (attrs.has("destinations")) return std::nullopt;
  // The layout pass converts a bfloat16 operand when it reads it.
  const fused::Program program = fused::without_conversions(fused::decode(attrs.get<std::string>("program")), [](int) { return true; });
  const auto& steps = program.steps;
  // a + b or b + a: the same sum.
  const bool sums_operands = steps.size() <= 2 && !steps.empty() && steps[0].op == "add" &&
                             (steps[0].args == std::vector<int>{0, 1} || steps[0].args == std::vector<int>{1, 0});
  if (!sums_operands || !steps[0].attrs.values().empty()) {
    return std::nullopt;
  }
  const bool relu = steps.size() == 2;
  if (relu && (steps[1].op != "relu" || steps[1].args != std::vector<int>{fused::step_arg(0)} || !steps[1].attrs.values().empty())) return std::nullopt;
  if (program.outputs != std::vector<int>{static_cast<int>(steps.size()) - 1}) return std::nullopt;
  return relu;
}

// Whether a step casts a 4-d CPU tensor from float32 to bfloat16 or back (a copy op on one
// device): the casts an AMP export puts around its bfloat16 convolutions.
inline bool is_float_cast(const std::string& name, const TensorMeta& in, const TensorMeta& out) {
  if (name != "copy" || !(in.device == out.device)) return false;
  return (is_cpu_4d(in, kFloat32) && is_cpu_4d(out, kBFloat16)) || (is_cpu_4d(in, kBFloat16) && is_cpu_4d(out, kFloat32));
}

// The bounds of a float32 or bfloat16 clamp step that keeps 0 at 0 (ReLU6: [0, 6]), so that it
// may also run over the zero padding channels of a blocked layout; nullopt for any other step.
inline std::optional<ClampBounds> zero_keeping_clamp(const std::string& name, const Attrs& attrs, const TensorMeta& out) {
  if (name != "clamp" || (out.dtype != kFloat32 && out.dtype != kBFloat16)) return std::nullopt;
  ClampBounds bounds{-std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity()};
  if (attrs.get<bool>("has_min")) bounds.lo = attrs.get<Scalar>("min").to<float>();
  if (attrs.get<bool>("has_max")) bounds.hi = attrs.get<Scalar>("max").to<float>();
  if (!(bounds.lo <= 0 && bounds.hi >= 0)) return std::nullopt;
  return bounds;
}

// Linears of 2 to this many rows run flow's product on weights packed once (cpu/linear_packed.h):
// OpenBLAS packs the weight matrix again on every call. Measured, 1 thread, x @ W^T with W
// 512x784: 2 rows 0.26 of OpenBLAS's time, 8 rows 0.6, 32 rows 0.8-0.9, 64 rows 0.9-1.25 (no
// better); on 2 threads, where flow splits the panels and OpenBLAS its own way, 64 rows too (the
// MLP at batch 64: 0.93 of the time; docs/performance.md). With AVX-512 every linear of 2 rows or
// more is a oneDNN matmul (brgemm) on weights packed once instead: on a Xeon (AVX-512, 2 vCPUs),
// 8x784x512 took 38 us there against ~90 for flow's AVX2 product, and 64 rows 0.8-0.85 of oneDNN
// on the unpacked weights. One row stays on flow's GEMV (OpenBLAS), whose threads keep their
// share of the weights in their own caches.
inline int64_t max_packed_linear_rows() {
  if (has_avx512_core()) return std::numeric_limits<int64_t>::max();
  return current_num_threads() > 1 ? 64 : 32;
}

// Whether a linear step (or a fused_linear whose program is relu of the product alone, the fusion
// pass's Linear + ReLU) runs on packed weights: on the CPU, a 2-d float32 input of a few rows (an
// AVX2 build: flow's product) or more (AVX-512: oneDNN's), or with AVX-512 a bfloat16 input of any
// rows (an AMP export; one row too: brgemm would pack the weights on each call), and constant
// contiguous weights and bias of the input's dtype. Returns whether a ReLU follows the product.
inline std::optional<bool> as_packed_linear(const std::string& name, const Attrs& attrs, const std::vector<TensorMeta>& in,
                                     const std::vector<int>& ids, const std::vector<const Tensor*>& constant_of) {
  bool relu = false;
  size_t linear_inputs = in.size();
  if (name == "fused_linear") {
    linear_inputs = static_cast<size_t>(attrs.get<int64_t>("linear_inputs"));
    const fused::Program program = fused::decode(attrs.get<std::string>("program"));
    if (linear_inputs != in.size() || program.steps.size() != 1 || program.steps[0].op != "relu" ||
        program.steps[0].args != std::vector<int>{0} || !program.steps[0].attrs.values().empty() || program.outputs != std::vector<int>{0}) {
      return std::nullopt;
    }
    relu = true;
  } else if (name != "linear") {
    return std::nullopt;
  }
  const TensorMeta& x = in[0];
  const bool float32 = x.dtype == kFloat32 && (cpu::PackedLinear::available() || has_avx512_core());
  const bool bfloat16 = x.dtype == kBFloat16 && has_avx512_core();
  if (!(float32 || bfloat16) || x.device.type != DeviceType::kCPU || x.shape.size() != 2 || x.shape[0] < (bfloat16 ? 1 : 2) ||
      x.shape[0] > max_packed_linear_rows() || x.shape[1] == 0 || in[1].shape[0] == 0) {
    return std::nullopt;
  }
  for (size_t i = 1; i < linear_inputs; ++i) {
    if (!constant_of[ids[i]] || !constant_of[ids[i]]->is_contiguous() || in[i].dtype != x.dtype) return std::nullopt;
  }
  return relu;
}

}  // namespace flow::graph::blocked_steps
