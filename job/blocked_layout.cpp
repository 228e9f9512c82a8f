#include "job/blocked_layout.h"

#include <glog/logging.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <optional>
#include <string_view>

#include "job/blocked_layout_kernel.h"

namespace flow::graph {

using namespace blocked_kernels;

namespace {

Operand make_operand(int value, const memory::desc& layout, bool blocked, const memory::desc& wanted, std::vector<size_t>& scratch_bytes) {
  Operand operand{value, blocked, layout, wanted, std::nullopt, -1};
  if (!(layout == wanted)) {
    operand.reorder.emplace(dnnl::reorder::primitive_desc(engine(), layout, engine(), wanted, user_scratchpad()));
    operand.scratch = static_cast<int>(scratch_bytes.size());
    scratch_bytes.push_back(wanted.get_size());
  }
  return operand;
}

// `source` (in layout `plain`) copied into layout `wanted`; null where the two are one layout.
std::shared_ptr<Storage> reorder_weights(const void* source, const memory::desc& plain, const memory::desc& wanted) {
  dnnl::stream stream(engine());
  Bound bound = bind_memory(plain, const_cast<void*>(source), wanted, stream, true);
  stream.wait();
  return std::move(bound.buffer);
}

}  // namespace

struct ReorderedWeights::Impl {
  // A copy lives while a kernel holds it, and that kernel holds the weight it was made from
  // (Kernel::weight_values): a live copy's source address is still that weight's.
  struct Copy {
    const void* source;
    memory::desc plain, wanted;
    std::weak_ptr<Storage> buffer;
  };
  std::mutex mutex;
  std::vector<Copy> copies;

  std::shared_ptr<Storage> reordered(const void* source, const memory::desc& plain, const memory::desc& wanted) {
    std::lock_guard<std::mutex> lock(mutex);
    std::erase_if(copies, [](const Copy& copy) { return copy.buffer.expired(); });
    for (const Copy& copy : copies) {
      if (copy.source != source || !(copy.plain == plain) || !(copy.wanted == wanted)) continue;
      // Its last kernel may have let it go since the erase above.
      if (std::shared_ptr<Storage> buffer = copy.buffer.lock()) return buffer;
    }
    std::shared_ptr<Storage> buffer = reorder_weights(source, plain, wanted);
    if (buffer) copies.push_back({source, plain, wanted, buffer});
    return buffer;
  }
};

ReorderedWeights::ReorderedWeights() : impl_(std::make_unique<Impl>()) {}
ReorderedWeights::~ReorderedWeights() = default;

int64_t ReorderedWeights::bytes() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  int64_t total = 0;
  for (const Impl::Copy& copy : impl_->copies) {
    if (std::shared_ptr<Storage> buffer = copy.buffer.lock()) total += static_cast<int64_t>(buffer->nbytes());
  }
  return total;
}

namespace {

// The constant weights (input 1) in the primitive's layout, reordered once from `weight_plain`
// (through `shared` when given), and the bias (input 2, when `bias_desc` is set) used as exported.
void bind_parameters(Kernel& kernel, const memory::desc& weight_plain, const memory::desc& weight_wanted, const memory::desc& bias_desc,
                     const std::vector<int>& in, const std::vector<const Tensor*>& constant_of, ReorderedWeights* shared) {
  kernel.weight_values = *constant_of[in[1]];
  void* source = kernel.weight_values.data_ptr();
  kernel.reordered_weights =
      shared ? shared->impl().reordered(source, weight_plain, weight_wanted) : reorder_weights(source, weight_plain, weight_wanted);
  kernel.weights = kernel.reordered_weights ? memory(weight_wanted, engine(), kernel.reordered_weights->data())
                                            : memory(weight_plain, engine(), source);
  if (!bias_desc.is_zero()) {
    kernel.bias_values = *constant_of[in[2]];
    kernel.bias = memory(bias_desc, engine(), kernel.bias_values.data_ptr());
  }
}

// The convolution `desc` with `attr` on the activation layouts `chosen` picked: the first of
// oneDNN's implementations, in its order, whose name `wanted` accepts; nullopt where none does.
template <typename Wanted>
std::optional<dnnl::convolution_forward::primitive_desc> on_chosen_layouts(const dnnl::convolution_forward::desc& desc,
                                                                           const dnnl::convolution_forward::primitive_desc& chosen,
                                                                           const dnnl::primitive_attr& attr, Wanted wanted) {
  const memory::desc src = chosen.src_desc(), dst = chosen.dst_desc();
  dnnl::convolution_forward::desc fixed = desc;
  fixed.data.src_desc = src.data;
  fixed.data.dst_desc = dst.data;
  try {
    dnnl::convolution_forward::primitive_desc candidate(fixed, attr, engine());
    do {
      if (wanted(std::string_view(candidate.impl_info_str())) && candidate.src_desc() == src && candidate.dst_desc() == dst) return candidate;
    } while (candidate.next_impl());
  } catch (const dnnl::error&) {
  }
  return std::nullopt;
}

// A float32 depthwise convolution on oneDNN's jit_dw kernel with the layouts (channels-last) that
// `chosen` picked, where oneDNN 2.6 picks brdgmm_dw first: for up to 384 channels jit_dw ran
// 10-25% faster on one Zen 4 core (batch 1: 32 channels at 112x112 52 against 65 us, 144 at 56x56
// 56 against 73, 192 at 28x28 19 against 24; batch 8 and 2 threads alike), from 576 channels
// slower (22 against 20 us at 14x14). nullopt where it keeps `chosen`.
std::optional<dnnl::convolution_forward::primitive_desc> depthwise_on_jit_dw(const dnnl::convolution_forward::desc& desc,
                                                                             const dnnl::convolution_forward::primitive_desc& chosen) {
  constexpr int64_t kMaxJitDwChannels = 384;
  if (chosen.src_desc().dims()[1] > kMaxJitDwChannels || !std::string_view(chosen.impl_info_str()).starts_with("brdgmm_dw")) {
    return std::nullopt;
  }
  return on_chosen_layouts(desc, chosen, user_scratchpad(), [](std::string_view name) { return name.starts_with("jit_dw"); });
}

// How much rounding to bfloat16 may grow a value's magnitude: half a unit in its last place.
constexpr double kRoundingGrowth = 1 + 1.0 / 256;

// `values` in float32: itself, or widened (exact from bfloat16).
Tensor as_float32(const Tensor& values) { return values.dtype() == kFloat32 ? values : values.to(kFloat32); }

// Bounds at most this large keep a float32 convolution's sums far from overflow.
constexpr double kMaxSafeBound = 1e30;

// The largest magnitude a convolution's result can take on inputs of at most `input_bound`: over
// the output channels, the largest sum of |weight| times the bound, plus the largest |bias|.
double convolution_bound(const Tensor& weight, const Tensor* bias, double input_bound) {
  const auto is_float = [](const Tensor& t) { return t.dtype() == kFloat32 || t.dtype() == kBFloat16; };
  if (!(input_bound < std::numeric_limits<double>::infinity()) || !is_float(weight) || (bias && !is_float(*bias))) {
    return std::numeric_limits<double>::infinity();
  }
  const Tensor weight_values = as_float32(weight);
  const int64_t channels = weight.size(0), per_channel = channels == 0 ? 0 : weight.numel() / channels;
  const float* w = weight_values.data_ptr<float>();
  double largest = 0;
  for (int64_t c = 0; c < channels; ++c) {
    double sum = 0;
    for (int64_t i = 0; i < per_channel; ++i) sum += std::abs(static_cast<double>(w[c * per_channel + i]));
    if (!std::isfinite(sum)) return std::numeric_limits<double>::infinity();  // a NaN or infinite weight
    largest = std::max(largest, sum);
  }
  double bias_bound = 0;
  if (bias) {
    const Tensor bias_values = as_float32(*bias);
    for (int64_t c = 0; c < bias->numel(); ++c) {
      const double magnitude = std::abs(static_cast<double>(bias_values.data_ptr<float>()[c]));
      if (!std::isfinite(magnitude)) return std::numeric_limits<double>::infinity();
      bias_bound = std::max(bias_bound, magnitude);
    }
  }
  return largest * input_bound + bias_bound;
}

// The convolution `chosen` picked, remade with its ReLU (or `clamp`) as oneDNN's post-op on the
// same layouts and implementation; nullopt where oneDNN has no such one.
std::optional<dnnl::convolution_forward::primitive_desc> with_activation(const dnnl::convolution_forward::desc& desc,
                                                          const dnnl::convolution_forward::primitive_desc& chosen,
                                                          const std::optional<ClampBounds>& clamp) {
  dnnl::post_ops activation;
  if (clamp) {
    activation.append_eltwise(1.f, dnnl::algorithm::eltwise_clip, clamp->lo, clamp->hi);
  } else {
    activation.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
  }
  dnnl::primitive_attr attr = user_scratchpad();
  attr.set_post_ops(activation);
  const std::string_view implementation = chosen.impl_info_str();
  return on_chosen_layouts(desc, chosen, attr, [&](std::string_view name) { return name == implementation; });
}

}  // namespace

std::shared_ptr<const BlockedLayouts> BlockedLayouts::plan(const std::vector<LayoutStep>& steps, const std::vector<TensorMeta>& metas,
                                                           const std::vector<std::pair<int, Tensor>>& constants,
                                                           const std::vector<int>& model_outputs, double checked_input_bound,
                                                           ReorderedWeights* shared) {
  // oneDNN fixes a primitive's threads when it is created: those of the calling thread.
  sync_openmp_threads();
  auto impl = std::make_unique<Impl>();
  impl->metas = metas;
  impl->kernels.resize(steps.size());
  const size_t num_values = metas.size();
  std::vector<const Tensor*> constant_of(num_values, nullptr);
  for (const auto& [id, weight] : constants) constant_of[id] = &weight;
  std::vector<std::vector<size_t>> readers(num_values);
  std::vector<int> producer(num_values, -1);
  for (size_t s = 0; s < steps.size(); ++s) {
    for (int id : *steps[s].inputs) readers[id].push_back(s);
    for (int id : *steps[s].outputs) producer[id] = static_cast<int>(s);
  }
  std::vector<bool> is_model_output(num_values, false);
  for (int id : model_outputs) is_model_output[id] = true;
  // Each value's largest possible magnitude, infinity where it may hold NaN or infinities (a value
  // of a step run by its op's kernel, or of a model input nobody checks).
  constexpr double kUnbounded = std::numeric_limits<double>::infinity();
  std::vector<double> bound(num_values, kUnbounded);
  if (checked_input_bound > 0) {
    for (size_t id = 0; id < num_values; ++id) {
      if (producer[id] < 0 && !constant_of[id]) bound[id] = checked_input_bound;
    }
  }

  std::vector<memory::desc> layouts(num_values);  // zero: plain
  std::vector<bool> blocked(num_values, false);
  // ReLU and clamp steps applied in place by the convolution before them (relu_after, clamp_after).
  std::vector<bool> fused_relu_step(steps.size(), false);
  // Whether a value is blocked and held in float32, which flow's loops over blocked memory read.
  auto blocked_float32 = [&](int value) { return blocked[value] && layouts[value].data_type() == memory::data_type::f32; };
  auto operand = [&](int value, const memory::desc& wanted) {
    return make_operand(value, blocked[value] ? layouts[value] : plain_of(metas[value]), blocked[value], wanted, impl->scratch_bytes);
  };
  // Takes the ReLU a convolution applies after itself (relu_after) away from it when that ReLU's
  // result is `value` and a max pooling alone reads it. The maximum of a window of ReLU outputs is
  // the ReLU of its maximum, NaN (propagated by both) and -inf (0 either way) included, so the
  // pooling applies it to its own, smaller result instead: one pass over the convolution's output
  // fewer.
  auto take_relu_before_pooling = [&](int value) {
    const int relu_step = producer[value];
    if (relu_step < 0 || !fused_relu_step[relu_step] || readers[value].size() != 1 || is_model_output[value]) return false;
    Kernel* conv = impl->kernels[producer[steps[relu_step].inputs->front()]].get();
    if (!conv || !conv->relu_after || conv->activation_in_primitive) return false;
    conv->relu_after = false;
    return true;
  };
  // On AVX-512, a 2x2 max pooling (stride 2, no padding) reading alone a oneDNN convolution's
  // result (or its ReLU's) where that convolution is a network's first layer on a model input
  // (1-4 channels, stride and dilation 1, no padding, one group): the pooling's kernel computes
  // all three (cpu::ShallowConvPool), and the convolution and ReLU steps are computed later. The
  // convolution's input must be a model input or a constant: its plain buffer is then never
  // reused before the pooling reads it. Returns whether the kernel took them.
  auto fold_shallow_conv = [&](size_t s, Kernel& pool) {
    const int pooled = steps[s].inputs->front();
    const Pair &kernel_size = steps[s].attrs->get<Pair>("kernel_size"), &stride = steps[s].attrs->get<Pair>("stride");
    if (!has_avx512_core() || kernel_size != Pair{2, 2} || stride != Pair{2, 2} || steps[s].attrs->get<Pair>("padding") != Pair{0, 0} ||
        producer[pooled] < 0 || readers[pooled].size() != 1 || is_model_output[pooled]) {
      return false;
    }
    const int relu_step = fused_relu_step[producer[pooled]] ? producer[pooled] : -1;
    const int conv_step = relu_step >= 0 ? producer[steps[relu_step].inputs->front()] : producer[pooled];
    Kernel* conv = conv_step < 0 ? nullptr : impl->kernels[conv_step].get();
    if (!conv || conv->kind != Kind::kConv || conv->sum_into >= 0 || conv->clamp_after) return false;
    const std::vector<int>& conv_in = *steps[conv_step].inputs;
    const Attrs& attrs = *steps[conv_step].attrs;
    // A bfloat16 first layer (an AMP export's) reads a model input cast to bfloat16: it runs in
    // float32 on that input itself, its weights widened exactly (one rounding fewer, as for its
    // float32 result), and the cast is computed later too (nothing else reads it).
    int source = conv_in[0], cast_step = -1;
    if (metas[source].dtype == kBFloat16 && producer[source] >= 0 && readers[source].size() == 1 && !impl->kernels[producer[source]] &&
        is_float_cast(steps[producer[source]].op->name, metas[steps[producer[source]].inputs->front()], metas[source])) {
      cast_step = producer[source];
      source = steps[cast_step].inputs->front();
    }
    if (blocked[source] || producer[source] >= 0 || metas[source].dtype != kFloat32 || attrs.get<Pair>("stride") != Pair{1, 1} ||
        attrs.get<Pair>("padding") != Pair{0, 0} || attrs.get<Pair>("dilation") != Pair{1, 1} || attrs.get<int64_t>("groups") != 1) {
      return false;
    }
    const Shape &x = metas[source].shape, &w = metas[conv_in[1]].shape;
    const cpu::ShallowConvPoolShape shape{x[0], x[1], x[2], x[3], w[0], w[2], w[3]};
    if (!cpu::ShallowConvPool::supports(shape)) return false;
    const Tensor weight = as_float32(*constant_of[conv_in[1]]), bias = conv_in.size() == 3 ? as_float32(*constant_of[conv_in[2]]) : Tensor();
    pool.shallow_conv_pool.emplace(shape, weight.data_ptr<float>(), bias.defined() ? bias.data_ptr<float>() : nullptr);
    CHECK(pool.shallow_conv_pool->pooled_height() == pool.out_meta.shape[2] && pool.shallow_conv_pool->pooled_width() == pool.out_meta.shape[3]);
    pool.kind = Kind::kShallowConvPool;
    pool.relu_after = conv->relu_after;
    pool.operands.push_back(operand(source, plain_of(metas[source])));
    pool.out_layout = channels_last_layout(dims_of(pool.out_meta.shape));
    for (int folded : {cast_step, conv_step, relu_step}) {
      if (folded < 0) continue;
      if (!impl->kernels[folded]) {  // the cast: its op's kernel would have run it
        impl->kernels[folded] = std::make_unique<Kernel>();
        ++impl->blocked_steps;
      }
      Kernel& skipped = *impl->kernels[folded];
      for (const Operand& unused : skipped.operands) {
        if (unused.scratch >= 0) impl->scratch_bytes[unused.scratch] = 0;  // its reorder never runs
      }
      skipped = Kernel{};
      skipped.kind = Kind::kComputedLater;
      skipped.output = steps[folded].outputs->front();
      skipped.out_meta = metas[skipped.output];
    }
    return true;
  };
  // A residual add of a convolution's result read by nothing else and of another value that is
  // ready before that convolution, in its output layout and read by nothing after it: the
  // convolution adds its result onto the other value's buffer (oneDNN's sum post-op; then the
  // add's ReLU, if any, as relu_after) and the add is that buffer: one pass over memory fewer.
  // Not into oneDNN's pointwise convolutions (brgconv_1x1, sum_post_op_slower): with AVX-512 their
  // sum post-op measured slower than the convolution alone plus the separate add, which also
  // applies the ReLU in the same pass (resnet50's 64 -> 256 on 56x56 at batch 8, 1 thread: 6.7-6.9
  // ms with the post-op against 3.6-3.9 + 1.0 ms; docs/performance.md).
  // Returns the convolution's result, or -1 when neither operand qualifies.
  auto sum_into_convolution = [&](size_t s, const std::vector<int>& in, bool relu) {
    for (int k : {0, 1}) {
      const int result = in[k], other = in[1 - k];
      const int conv_step = producer[result];
      Kernel* conv = conv_step < 0 ? nullptr : impl->kernels[conv_step].get();
      if (!conv || (conv->kind != Kind::kConv && conv->kind != Kind::kDirectConv) || conv->sum_post_op_slower || conv->relu_after || conv->clamp_after ||
          readers[result].size() != 1 || is_model_output[result]) {
        continue;
      }
      if (!blocked[other] || is_model_output[other] || !(layouts[other] == conv->out_layout) || producer[other] >= conv_step) continue;
      const std::vector<size_t>& other_readers = readers[other];
      if (std::any_of(other_readers.begin(), other_readers.end(), [&](size_t r) { return r != s && static_cast<int>(r) >= conv_step; })) {
        continue;
      }
      if (conv->kind == Kind::kDirectConv) {  // accumulates onto the buffer itself
        conv->sum_into = other;
        conv->relu_after = relu;
        return result;
      }
      // Remade with the thread count it was made with.
      std::optional<ThreadCapScope> cap;
      if (conv->single_thread) cap.emplace(1);
      dnnl::post_ops sum;
      sum.append_sum(1.f);
      dnnl::primitive_attr attr = user_scratchpad();
      attr.set_post_ops(sum);
      try {
        dnnl::convolution_forward::primitive_desc pd(*conv->conv_desc, attr, engine());
        if (!(pd.src_desc() == conv->operands[0].wanted) || !(pd.weights_desc() == conv->weights.get_desc()) || !(pd.dst_desc() == conv->out_layout)) {
          continue;
        }
        conv->primitive.emplace(dnnl::convolution_forward(pd));
      } catch (const dnnl::error& e) {
        VLOG(1) << "blocked layouts: a residual add stays a separate step: oneDNN refuses the convolution with a sum post-op (" << e.what() << ")";
        continue;
      }
      conv->sum_into = other;
      conv->relu_after = relu;
      return result;
    }
    return -1;
  };

  for (size_t s = 0; s < steps.size(); ++s) {
    const LayoutStep& step = steps[s];
    const std::string& name = step.op->name;
    if (step.outputs->size() != 1) continue;
    const int out = step.outputs->front();
    const TensorMeta& out_meta = metas[out];
    const std::vector<int>& in = *step.inputs;
    std::vector<TensorMeta> in_metas;
    for (int id : in) in_metas.push_back(metas[id]);
    auto kernel = std::make_unique<Kernel>();
    double conv_bound = kUnbounded;  // a convolution's result after its ReLU or clamp
    kernel->output = out;
    kernel->out_meta = out_meta;
    kernel->single_thread = is_small(name, in_metas, out_meta);
    std::optional<ThreadCapScope> cap;
    if (kernel->single_thread) cap.emplace(1);
    try {
      if (fused_relu_step[s]) {
        kernel->kind = Kind::kAlias;
        kernel->out_layout = layouts[in[0]];
      } else if (name == "conv2d") {
        // bfloat16 (an AMP export's) with AVX-512, where oneDNN has bfloat16 kernels.
        const DType dtype = in_metas[0].dtype;
        const bool bfloat16 = dtype == kBFloat16 && has_avx512_core();
        const auto constant_weight = [&](size_t i, bool float32_too) {
          const bool dtype_ok = in_metas[i].dtype == dtype || (float32_too && in_metas[i].dtype == kFloat32);
          return constant_of[in[i]] && constant_of[in[i]]->is_contiguous() && dtype_ok;
        };
        if (!(is_cpu_float_4d(in_metas[0]) || bfloat16) || !is_cpu_4d(out_meta, dtype) || !constant_weight(1, false) ||
            (in.size() == 3 && !constant_weight(2, true))) {
          continue;
        }
        const memory::data_type type = *data_type_of(dtype);
        const Attrs& attrs = *step.attrs;
        const Pair &stride = attrs.get<Pair>("stride"), &padding = attrs.get<Pair>("padding"), &dilation = attrs.get<Pair>("dilation");
        const int64_t groups = attrs.get<int64_t>("groups");
        const Shape& w = in_metas[1].shape;
        const Dims weight_dims = groups == 1 ? Dims{w[0], w[1], w[2], w[3]} : Dims{groups, w[0] / groups, w[1], w[2], w[3]};
        // oneDNN's bfloat16 convolutions multiply input channels in pairs: with an odd count per
        // group, the last pair's second element is the next pixel's first channel times a zero
        // weight, which makes NaN of an infinite or NaN input at a neighbouring output too. They
        // take the blocked steps only where no such input can reach them (finite bound, from
        // inputs accepts() checks).
        const bool needs_finite_input = bfloat16 && w[1] % 2 == 1;
        if (needs_finite_input && !(bound[in[0]] <= kMaxSafeBound)) continue;
        // An AMP export casts a bfloat16 convolution's result to float32 for the ops after it;
        // that cast, when it alone reads the result, is the same memory (kAlias), and so is the
        // ReLU or clamp after it.
        int result = out;
        if (bfloat16 && readers[out].size() == 1 && !is_model_output[out]) {
          const LayoutStep& cast = steps[readers[out][0]];
          const int cast_out = cast.outputs->front();
          if (is_float_cast(cast.op->name, out_meta, metas[cast_out])) result = cast_out;
        }
        // A ReLU or a clamp keeping 0 that alone reads the result is applied right after the
        // convolution (relu_after, clamp_after).
        const std::vector<size_t>& next = readers[result];
        const bool alone = next.size() == 1 && !is_model_output[result];
        const bool relu = alone && steps[next[0]].op->name == "relu";
        const std::optional<ClampBounds> clamp =
            alone ? zero_keeping_clamp(steps[next[0]].op->name, *steps[next[0]].attrs, metas[steps[next[0]].outputs->front()]) : std::nullopt;
        // A bfloat16 convolution writes bfloat16 (rounded, as its op's kernel) where only casts
        // back to bfloat16 or bfloat16 convolutions read the value its result becomes, and they
        // read it as it is (kAlias); elsewhere float32, unrounded, which the ops after it read
        // without a cast.
        const int reaching = relu || clamp ? steps[next[0]].outputs->front() : result;
        const auto reads_bfloat16 = [&](size_t reader) {
          const LayoutStep& step = steps[reader];
          if (step.op->name == "conv2d") return metas[reaching].dtype == kBFloat16;
          return metas[reaching].dtype == kFloat32 && is_float_cast(step.op->name, metas[reaching], metas[step.outputs->front()]);
        };
        const std::vector<size_t>& reaching_readers = readers[reaching];
        const bool bfloat16_result = bfloat16 && !is_model_output[reaching] && !reaching_readers.empty() &&
                                     std::all_of(reaching_readers.begin(), reaching_readers.end(), reads_bfloat16);
        const bool has_bias = in.size() == 3;
        const memory::desc bias_any = has_bias ? any({out_meta.shape[1]}, *data_type_of(in_metas[2].dtype)) : memory::desc();
        const memory::data_type result_type = bfloat16_result ? memory::data_type::bf16 : memory::data_type::f32;
        dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                             any(dims_of(in_metas[0].shape), type), any(weight_dims, type), bias_any,
                                             any(dims_of(out_meta.shape), result_type),
                                             {stride[0], stride[1]}, {dilation[0] - 1, dilation[1] - 1}, {padding[0], padding[1]},
                                             {padding[0], padding[1]});
        dnnl::convolution_forward::primitive_desc pd(desc, user_scratchpad(), engine());
        if (bfloat16 && is_reference_implementation(pd.impl_info_str())) continue;  // no bfloat16 kernel here
        if (groups > 1 && groups == w[0] && groups == in_metas[0].shape[1] && dtype == kFloat32) {
          if (auto jit = depthwise_on_jit_dw(desc, pd)) pd = *jit;
        }
        const double pre_activation = convolution_bound(*constant_of[in[1]], has_bias ? constant_of[in[2]] : nullptr, bound[in[0]]);
        conv_bound = clamp ? std::max(std::abs(clamp->lo), std::abs(clamp->hi)) : pre_activation;
        if (!(pre_activation <= kMaxSafeBound)) conv_bound = kUnbounded;
        bool activation_in_primitive = false;
        if ((relu || clamp) && pre_activation <= kMaxSafeBound) {
          if (auto fused = with_activation(desc, pd, clamp)) {
            pd = *fused;
            activation_in_primitive = true;
          }
        }
        const Shape& x = in_metas[0].shape;
        const cpu::BlockedConvShape direct{x[0], x[1], x[2], x[3], out_meta.shape[1], out_meta.shape[2], out_meta.shape[3],
                                           w[2], w[3], stride[0], stride[1], padding[0], padding[1]};
        // Where oneDNN chose nChw8c in and out (AVX2) and the shape suits flow's direct convolution,
        // that runs instead: 0.55-0.8 of oneDNN's time on 8-16 channels, 0.83-0.9 on 32 -> 64
        // (docs/performance.md).
        if (groups == 1 && dilation == Pair{1, 1} && dtype == kFloat32 && !has_avx512_core() && cpu::BlockedConv::supports(direct) &&
            pd.src_desc() == channel_blocked(dims_of(x), 8) && pd.dst_desc() == channel_blocked(dims_of(out_meta.shape), 8)) {
          kernel->kind = Kind::kDirectConv;
          kernel->direct_conv.emplace(direct, constant_of[in[1]]->data_ptr<float>(), has_bias ? constant_of[in[2]]->data_ptr<float>() : nullptr);
          kernel->operands.push_back(operand(in[0], pd.src_desc()));
          kernel->out_layout = pd.dst_desc();
        } else {
          kernel->kind = Kind::kConv;
          kernel->activation_in_primitive = activation_in_primitive;
          kernel->needs_finite_input = needs_finite_input;
          kernel->conv_desc.emplace(desc);
          kernel->sum_post_op_slower = std::string(pd.impl_info_str()).find("brgconv_1x1") != std::string::npos;
          kernel->primitive.emplace(dnnl::convolution_forward(pd));
          kernel->operands.push_back(operand(in[0], pd.src_desc()));
          const memory::desc bias_desc = has_bias ? pd.bias_desc() : memory::desc();
          bind_parameters(*kernel, plain(weight_dims, type), pd.weights_desc(), bias_desc, in, constant_of, shared);
          kernel->out_layout = pd.dst_desc();
        }
        kernel->relu_after = relu;
        kernel->clamp_after = clamp;
        if (relu || clamp) fused_relu_step[next[0]] = true;
      } else if (const std::optional<bool> relu = as_packed_linear(name, *step.attrs, in_metas, in, constant_of)) {
        const int64_t rows = in_metas[0].shape[0], in_features = in_metas[0].shape[1], out_features = in_metas[1].shape[0];
        const memory::data_type type = *data_type_of(in_metas[0].dtype);
        kernel->relu_after = *relu;
        kernel->out_layout = plain({rows, out_features}, type);
        if (has_avx512_core()) {
          const bool has_bias = in.size() == 3;
          // x (rows, in) @ W^T: the (out, in) row-major weight is the (in, out) matrix in layout "ba".
          const memory::desc weight_plain({in_features, out_features}, type, memory::format_tag::ba);
          dnnl::matmul::desc desc(plain({rows, in_features}, type), any({in_features, out_features}, type),
                                  has_bias ? plain({1, out_features}, type) : memory::desc(), kernel->out_layout);
          dnnl::matmul::primitive_desc pd(desc, user_scratchpad(), engine());
          if (is_reference_implementation(pd.impl_info_str())) continue;  // bfloat16 without AVX512-BF16: the op's kernel widens
          kernel->kind = Kind::kMatmul;
          kernel->primitive.emplace(dnnl::matmul(pd));
          kernel->operands.push_back(operand(in[0], pd.src_desc()));
          bind_parameters(*kernel, weight_plain, pd.weights_desc(), has_bias ? pd.bias_desc() : memory::desc(), in, constant_of, shared);
        } else {
          kernel->kind = Kind::kPackedLinear;
          kernel->packed_linear.emplace(in_features, out_features, constant_of[in[1]]->data_ptr<float>(),
                                        in.size() == 3 ? constant_of[in[2]]->data_ptr<float>() : nullptr);
          kernel->operands.push_back(operand(in[0], plain({rows, in_features})));
        }
      } else if (is_float_cast(name, in_metas[0], out_meta)) {
        if (!blocked[in[0]]) {
          bound[out] = bound[in[0]] * kRoundingGrowth;  // its op's kernel rounds as a kConvert step does
          continue;
        }
        const memory::desc& layout = layouts[in[0]];
        // A value's layout may hold it in the other dtype: a bfloat16 convolution's float32 result
        // (unrounded), or a float32 value that is one rounded to bfloat16. Widening to float32 is
        // exact, so the cast is then the same memory, as is one to bfloat16 of a rounded value.
        if (out_meta.dtype == kFloat32 || layout.data_type() == memory::data_type::bf16) {
          kernel->kind = Kind::kAlias;
          kernel->out_layout = layout;
        } else {
          const memory::data_type type = *data_type_of(out_meta.dtype);
          kernel->kind = Kind::kConvert;
          kernel->out_layout = with_data_type(layout, type);
          const dnnl::reorder::primitive_desc pd(engine(), layout, engine(), kernel->out_layout, user_scratchpad());
          kernel->primitive.emplace(dnnl::reorder(pd));
          kernel->operands.push_back(operand(in[0], layout));
        }
      } else if (name == "max_pool2d_inference") {
        // Also a bfloat16 value held in float32 (a bfloat16 convolution's result, unrounded): the
        // maximum of rounded values is the rounded maximum, so it stays unrounded too.
        if (!blocked_float32(in[0]) || !(is_cpu_float_4d(out_meta) || is_cpu_4d(out_meta, kBFloat16))) continue;
        if (!fold_shallow_conv(s, *kernel)) {
          const Dims out_dims = dims_of(out_meta.shape);
          const bool channels_last = layouts[in[0]] == channels_last_layout(layouts[in[0]].dims());
          const int block = channels_last ? cpu::channels_last_block(in_metas[0].shape[1]) : channel_block(layouts[in[0]]);
          if (block == 0) continue;
          kernel->kind = Kind::kMaxPool;
          kernel->block = block;
          kernel->pool = cpu::blocked_pool_geometry(in_metas[0].shape, out_meta.shape, *step.attrs, block);
          kernel->planes =
              channels_last ? cpu::channels_last_planes(kernel->pool, in_metas[0].shape[1]) : cpu::channel_blocked_planes(kernel->pool, block);
          kernel->operands.push_back(operand(in[0], layouts[in[0]]));
          kernel->out_layout = channels_last ? channels_last_layout(out_dims) : channel_blocked(out_dims, block);
          kernel->relu_after = take_relu_before_pooling(in[0]);
        }
      } else if (name == "avg_pool2d") {
        if (!blocked_float32(in[0]) || !is_cpu_float_4d(out_meta)) continue;
        const Attrs& attrs = *step.attrs;
        const Pair &kernel_size = attrs.get<Pair>("kernel_size"), &stride = attrs.get<Pair>("stride"), &padding = attrs.get<Pair>("padding");
        dnnl::pooling_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::pooling_avg_include_padding, layouts[in[0]],
                                         any(dims_of(out_meta.shape)), stride, kernel_size, padding, padding);
        dnnl::pooling_forward::primitive_desc pd(desc, user_scratchpad(), engine());
        kernel->kind = Kind::kPool;
        kernel->primitive.emplace(dnnl::pooling_forward(pd));
        kernel->operands.push_back(operand(in[0], pd.src_desc()));
        kernel->out_layout = pd.dst_desc();
      } else if (name == "relu") {
        if (!blocked_float32(in[0]) || !is_cpu_float_4d(out_meta)) continue;
        dnnl::eltwise_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::eltwise_relu, layouts[in[0]], 0.f, 0.f);
        dnnl::eltwise_forward::primitive_desc pd(desc, user_scratchpad(), engine());
        kernel->kind = Kind::kRelu;
        kernel->primitive.emplace(dnnl::eltwise_forward(pd));
        kernel->operands.push_back(operand(in[0], pd.src_desc()));
        kernel->out_layout = pd.dst_desc();
      } else if (std::optional<bool> relu = residual_add(name, *step.attrs, in_metas, out_meta)) {
        // The sum runs on the layout of a blocked float32 operand (not on a bfloat16 one's).
        if (!blocked_float32(in[0]) && !blocked_float32(in[1])) continue;
        // A ReLU step alone reading a plain add (unfused: an AMP export's add of two casts, run
        // in float32 by lite) is applied with the sum, as the fused relu(a + b).
        const std::vector<size_t>& next = readers[out];
        if (!*relu && next.size() == 1 && !is_model_output[out] && steps[next[0]].op->name == "relu") {
          relu = true;
          fused_relu_step[next[0]] = true;
        }
        cap.reset();
        const int summed = sum_into_convolution(s, in, *relu);
        if (kernel->single_thread) cap.emplace(1);
        if (summed >= 0) {
          kernel->kind = Kind::kAlias;
          kernel->out_layout = layouts[summed];
        } else {
          // The sum (flow's loop relu(a + b) or a + b over the whole layout: padding channels hold
          // zeros in both) reads and writes the layout of a blocked operand; the other is reordered
          // to it.
          const int first = blocked_float32(in[0]) ? in[0] : in[1], second = first == in[0] ? in[1] : in[0];
          const memory::desc& layout = layouts[first];
          kernel->kind = Kind::kAdd;
          kernel->relu_after = *relu;
          kernel->operands.push_back(operand(first, layout));
          kernel->operands.push_back(operand(second, layout));
          kernel->out_layout = layout;
        }
      } else {
        continue;
      }
    } catch (const dnnl::error& e) {
      VLOG(1) << "blocked layouts: " << name << " stays on its kernel: oneDNN refuses it on blocked layouts (" << e.what() << ")";
      continue;
    }
    layouts[out] = kernel->out_layout;
    blocked[out] = true;
    switch (kernel->kind) {
      case Kind::kConv:
      case Kind::kDirectConv:
        bound[out] = conv_bound;
        break;
      case Kind::kAdd:
        bound[out] = bound[in[0]] + bound[in[1]];
        break;
      case Kind::kConvert:
        bound[out] = bound[in[0]] * kRoundingGrowth;
        break;
      case Kind::kAlias:  // a ReLU or clamp its convolution applies, or a residual add folded into one
        bound[out] = in.size() == 2 ? bound[in[0]] + bound[in[1]] : bound[in[0]];
        break;
      case Kind::kRelu:
      case Kind::kPool:
      case Kind::kMaxPool:
      case Kind::kShallowConvPool:
        bound[out] = bound[in[0]];
        break;
      default:
        break;
    }
    impl->kernels[s] = std::move(kernel);
    ++impl->blocked_steps;
  }

  bool checks_inputs = false;
  for (const auto& kernel : impl->kernels) {
    impl->activations_in_primitives += kernel && kernel->activation_in_primitive;
    checks_inputs = checks_inputs || (kernel && (kernel->activation_in_primitive || kernel->needs_finite_input));
  }
  if (checks_inputs) impl->input_bound = checked_input_bound;

  // Results read by an op's kernel or returned by the model are also written in plain NCHW.
  for (size_t s = 0; s < steps.size(); ++s) {
    Kernel* kernel = impl->kernels[s].get();
    if (!kernel) continue;
    const int out = kernel->output;
    bool plain_needed = is_model_output[out];
    for (size_t reader : readers[out]) plain_needed |= !impl->kernels[reader];
    kernel->plain_needed = plain_needed;
    if (plain_needed) {
      kernel->to_plain.emplace(
          dnnl::reorder::primitive_desc(engine(), kernel->out_layout, engine(), plain_of(metas[out]), user_scratchpad()));
    }
  }

  // Arena buffers: a value takes a free buffer when its step runs. An alias's result (a fused
  // ReLU's, a cast's) lives in its input's buffer, that of a convolution summing into another value
  // in that value's, and a residual add's in that of an operand nothing reads after it (the sum is
  // element by element, in place). A buffer is free again after the last blocked reader of every
  // value in it.
  impl->slot_of.assign(num_values, -1);
  std::vector<size_t> last_reader(num_values, 0);
  for (size_t s = 0; s < steps.size(); ++s) {
    if (!impl->kernels[s]) continue;
    for (int id : *steps[s].inputs) last_reader[id] = s;
  }
  std::vector<size_t> last_use;  // by buffer: the last step that reads a value in it
  std::vector<bool> is_free;     // by buffer
  std::vector<int> free_slots;
  auto add_in_place = [&](const Kernel& kernel, size_t s) {
    if (kernel.kind != Kind::kAdd) return -1;
    for (const Operand& operand : kernel.operands) {
      if (operand.blocked && !operand.reorder && last_use[impl->slot_of[operand.value]] == s) return impl->slot_of[operand.value];
    }
    return -1;
  };
  for (size_t s = 0; s < steps.size(); ++s) {
    const Kernel* kernel = impl->kernels[s].get();
    if (!kernel || kernel->kind == Kind::kComputedLater) continue;  // the latter: no memory, slot -1
    const int out = kernel->output;
    int slot;
    if (kernel->kind == Kind::kAlias) {
      slot = impl->slot_of[steps[s].inputs->front()];
    } else if (kernel->sum_into >= 0) {
      slot = impl->slot_of[kernel->sum_into];
    } else if (const int reused = add_in_place(*kernel, s); reused >= 0) {
      slot = reused;
    } else if (free_slots.empty()) {
      slot = static_cast<int>(impl->slot_bytes.size());
      impl->slot_bytes.push_back(0);
      last_use.push_back(0);
      is_free.push_back(false);
    } else {
      slot = free_slots.back();
      free_slots.pop_back();
      is_free[slot] = false;
      last_use[slot] = 0;
    }
    impl->slot_of[out] = slot;
    if (kernel->kind != Kind::kAlias) impl->slot_bytes[slot] = std::max(impl->slot_bytes[slot], kernel->out_layout.get_size());
    last_use[slot] = std::max({last_use[slot], last_reader[out], s});
    for (size_t used = 0; used < last_use.size(); ++used) {
      if (!is_free[used] && last_use[used] <= s) {
        is_free[used] = true;
        free_slots.push_back(static_cast<int>(used));
      }
    }
  }
  return std::shared_ptr<const BlockedLayouts>(new BlockedLayouts(std::move(impl)));
}

}  // namespace flow::graph
