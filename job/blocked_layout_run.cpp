#include "job/blocked_layout.h"

#include <bit>
#include <cmath>
#include <unordered_map>

#include "core/kernels/cpu/elementwise_math.h"

#include "job/blocked_layout_kernel.h"

namespace flow::graph {

using namespace blocked_kernels;

void BlockedArenaDeleter::operator()(BlockedArena* arena) const { delete arena; }

namespace {

// A residual add, relu(a + b) or a + b, over `count` floats of one layout; `out` may be `a` or `b`.
// flow's loop rather than oneDNN's binary primitive: the ReLU keeps NaN in the same pass (oneDNN's
// ReLU post-op would not), where the primitive needed a second pass over the result.
void add_residual(const float* a, const float* b, float* out, int64_t count, bool relu) {
  parallel_for(0, count, kElementwiseGrain, [=](int64_t lo, int64_t hi) {
    // Element i reads and writes only index i, so `out` aliasing an operand is no dependence.
    if (relu) {
#pragma GCC ivdep
      for (int64_t i = lo; i < hi; ++i) out[i] = cpu::math::relu(a[i] + b[i]);
    } else {
#pragma GCC ivdep
      for (int64_t i = lo; i < hi; ++i) out[i] = a[i] + b[i];
    }
  });
}

// Whether a kernel's relu_after is for apply_after (the others apply it themselves).
bool relu_applied_after(const Kernel& kernel) {
  const Kind kind = kernel.kind;
  const bool applies_its_own =
      kind == Kind::kDirectConv || kind == Kind::kPackedLinear || kind == Kind::kShallowConvPool || kind == Kind::kAdd;
  return kernel.relu_after && !applies_its_own;
}

// Writes a float32 that is a bfloat16 already (a ReLU or clamp of one) by its high half: exact,
// and unlike BFloat16's rounding constructor it vectorises.
inline void store_exact(float& element, float value) { element = value; }
inline void store_exact(BFloat16& element, float value) { element.bits = static_cast<uint16_t>(std::bit_cast<uint32_t>(value) >> 16); }

// The ReLU or clamp (to [lo, hi]) of apply_after over `count` elements from `values`.
template <typename T>
void activate(const Kernel& kernel, T* values, int64_t count, float lo, float hi) {
  if (relu_applied_after(kernel)) {
    parallel_for(0, count, kElementwiseGrain, [values](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) store_exact(values[i], cpu::math::relu(static_cast<float>(values[i])));
    });
  }
  if (kernel.clamp_after) {
    parallel_for(0, count, kElementwiseGrain, [values, lo, hi](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) store_exact(values[i], cpu::math::clamp(static_cast<float>(values[i]), lo, hi));
    });
  }
}

// The ReLU or clamp a kernel applies after its primitive (relu_after, clamp_after), in place on
// `bytes` of its result from `data`: every element of the layout, since the padding channels of a
// blocked one hold zeros, which both keep. A bfloat16 result (a linear's or convolution's) is
// activated as rounded: rounding keeps signs, zeros and NaN and is monotonic, so the ReLU or clamp
// of the rounded value (to the rounded bounds) is the rounded ReLU or clamp, a bfloat16 itself.
void apply_after(const Kernel& kernel, void* data, int64_t bytes) {
  if (kernel.activation_in_primitive) return;
  const ClampBounds bounds = kernel.clamp_after.value_or(ClampBounds{0, 0});
  if (kernel.out_layout.data_type() == memory::data_type::bf16) {
    const int64_t count = bytes / static_cast<int64_t>(sizeof(BFloat16));
    activate(kernel, static_cast<BFloat16*>(data), count, BFloat16(bounds.lo), BFloat16(bounds.hi));
  } else {
    activate(kernel, static_cast<float*>(data), bytes / static_cast<int64_t>(sizeof(float)), bounds.lo, bounds.hi);
  }
}

}  // namespace

BlockedLayouts::BlockedLayouts(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BlockedLayouts::~BlockedLayouts() = default;

bool BlockedLayouts::runs(size_t s) const { return impl_->kernels[s] != nullptr; }
int64_t BlockedLayouts::blocked_steps() const { return impl_->blocked_steps; }
int64_t BlockedLayouts::activations_in_primitives() const { return impl_->activations_in_primitives; }

bool BlockedLayouts::accepts(const TensorList& inputs) const {
  const double bound = impl_->input_bound;
  if (bound == 0) return true;
  for (const Tensor& input : inputs) {
    if (!is_floating(input.dtype())) continue;
    const Tensor values = input.dtype() == kFloat32 && input.is_contiguous() ? input : input.contiguous().to(kFloat32);
    const float* data = values.data_ptr<float>();
    const auto limit = static_cast<float>(bound);
    // A comparison that NaN fails: the loop counts the values outside, vectorised, without a branch.
    const int64_t n = values.numel();
    int64_t outside = 0;
    for (int64_t i = 0; i < n; ++i) outside += !(std::abs(data[i]) <= limit);
    if (outside > 0) return false;
  }
  return true;
}

std::vector<int> BlockedLayouts::blocked_only_values() const {
  std::vector<int> values;
  for (const auto& kernel : impl_->kernels) {
    if (kernel && !kernel->plain_needed) values.push_back(kernel->output);
  }
  return values;
}

int64_t BlockedLayouts::arena_bytes() const {
  int64_t bytes = 0;
  for (size_t size : impl_->slot_bytes) bytes += static_cast<int64_t>(size);
  for (size_t size : impl_->scratch_bytes) bytes += static_cast<int64_t>(size);
  return bytes;
}

BlockedArenaPtr BlockedLayouts::make_arena() const {
  BlockedArenaPtr arena(new BlockedArena);
  for (size_t size : impl_->slot_bytes) arena->slots.emplace_back(memory::desc({static_cast<int64_t>(size)}, memory::data_type::u8, memory::format_tag::a), engine());
  arena->scratch.resize(impl_->scratch_bytes.size());
  arena->values.resize(impl_->metas.size());
  for (const auto& kernel : impl_->kernels) {
    if (!kernel || kernel->kind == Kind::kComputedLater) continue;
    const int slot = impl_->slot_of[kernel->output];
    arena->values[kernel->output] = memory(kernel->out_layout, engine(), arena->slots[slot].get_data_handle());
    for (const Operand& operand : kernel->operands) {
      if (operand.scratch >= 0) arena->scratch[operand.scratch] = memory(operand.wanted, engine());
    }
  }
  return arena;
}

void BlockedLayouts::run(size_t s, BlockedArena& arena, TensorList& values, const Tensor& plain_output) const {
  const Kernel& kernel = *impl_->kernels[s];
  if (kernel.kind == Kind::kComputedLater) return;
  std::optional<ThreadCapScope> cap;
  if (kernel.single_thread) cap.emplace(1);
  dnnl::stream stream = stream_for_call();
  memory& out = arena.values[kernel.output];
  if (kernel.kind != Kind::kAlias) {
    std::vector<memory> sources;
    for (const Operand& operand : kernel.operands) {
      memory source = operand.blocked ? arena.values[operand.value] : memory(operand.layout, engine(), contiguous(values[operand.value]).data_ptr());
      if (operand.reorder) {
        memory& reordered = arena.scratch[operand.scratch];
        run_primitive(*operand.reorder, stream, {{DNNL_ARG_FROM, source}, {DNNL_ARG_TO, reordered}});
        source = reordered;
      }
      sources.push_back(source);
    }
    if (kernel.kind == Kind::kMaxPool) {
      cpu::max_pool_blocked(kernel.pool, kernel.planes, kernel.block, static_cast<const float*>(sources[0].get_data_handle()),
                            static_cast<float*>(out.get_data_handle()));
    } else if (kernel.kind == Kind::kShallowConvPool) {
      kernel.shallow_conv_pool->run(static_cast<const float*>(sources[0].get_data_handle()), static_cast<float*>(out.get_data_handle()),
                                    kernel.relu_after);
    } else if (kernel.kind == Kind::kDirectConv) {
      stream.wait();  // the source's reorder, if any
      kernel.direct_conv->run(static_cast<const float*>(sources[0].get_data_handle()), static_cast<float*>(out.get_data_handle()),
                              kernel.sum_into >= 0, kernel.relu_after);
    } else if (kernel.kind == Kind::kAdd) {
      stream.wait();  // the operands' reorders, if any
      add_residual(static_cast<const float*>(sources[0].get_data_handle()), static_cast<const float*>(sources[1].get_data_handle()),
                   static_cast<float*>(out.get_data_handle()), static_cast<int64_t>(kernel.out_layout.get_size() / sizeof(float)), kernel.relu_after);
    } else if (kernel.kind == Kind::kPackedLinear) {
      const Shape& x = impl_->metas[kernel.operands[0].value].shape;
      kernel.packed_linear->run(static_cast<const float*>(sources[0].get_data_handle()), x[0], x[1], static_cast<float*>(out.get_data_handle()),
                                kernel.relu_after);
    } else {
      std::unordered_map<int, memory> args{{DNNL_ARG_DST, out}};
      switch (kernel.kind) {
        case Kind::kConv:
        case Kind::kMatmul:
          args.emplace(DNNL_ARG_SRC, sources[0]);
          args.emplace(DNNL_ARG_WEIGHTS, kernel.weights);
          if (kernel.bias_values.defined()) args.emplace(DNNL_ARG_BIAS, kernel.bias);
          break;
        default:
          args.emplace(DNNL_ARG_SRC, sources[0]);
      }
      run_primitive(*kernel.primitive, stream, std::move(args));
    }
    stream.wait();
    apply_after(kernel, out.get_data_handle(), static_cast<int64_t>(kernel.out_layout.get_size()));
  }
  if (kernel.plain_needed) {
    Tensor result = plain_output.defined() ? plain_output : make_tensor(kernel.out_meta.shape, kernel.out_meta.dtype, kernel.out_meta.device);
    memory result_plain(plain_of(kernel.out_meta), engine(), result.data_ptr());
    run_primitive(*kernel.to_plain, stream, {{DNNL_ARG_FROM, out}, {DNNL_ARG_TO, result_plain}});
    values[kernel.output] = std::move(result);
  }
  stream.wait();
}

}  // namespace flow::graph
