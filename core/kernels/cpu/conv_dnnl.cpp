// float32 and bfloat16 convolution through oneDNN (the library libtorch uses on CPU): forward,
// backward-data and backward-weights primitives over plain NCHW/OIHW buffers, with the layouts
// oneDNN prefers ("any") and reorders around them. Primitives are cached per (shape, parameters,
// dtype), since creating one JIT-compiles code. bfloat16 takes oneDNN where it has optimized
// kernels for it on the CPU (AVX512-BF16, AMX), and is computed in float32 and rounded elsewhere.
// float64 stays on im2col + GEMM (conv.cpp): oneDNN has no f64.
#include <cstring>
#include <optional>

#include "core/kernels/cpu/conv_gemm.h"
#include "core/kernels/cpu/conv_shallow.h"
#include "core/kernels/cpu/dnnl_util.h"
#include "core/kernels/cpu/reduced_float.h"
#include "core/op.h"

namespace flow::cpu {
namespace {

using namespace dnnl_util;
using Pair = std::vector<int64_t>;

struct ConvKey {
  Dims src, weights, dst, strides, dilates, padding;
  bool bias;
  memory::data_type type;
  auto tie() const { return std::tie(src, weights, dst, strides, dilates, padding, bias, type); }
  bool operator<(const ConvKey& other) const { return tie() < other.tie(); }
};

ConvKey make_key(const Shape& x, const Shape& w, const Shape& y, const Attrs& attrs, bool bias, DType dtype) {
  const Pair &s = attrs.get<Pair>("stride"), &p = attrs.get<Pair>("padding"), &d = attrs.get<Pair>("dilation");
  const int64_t groups = attrs.get<int64_t>("groups");
  Dims weights = groups == 1 ? Dims{w[0], w[1], w[2], w[3]} : Dims{groups, w[0] / groups, w[1], w[2], w[3]};
  return {Dims(x.begin(), x.end()), weights, Dims(y.begin(), y.end()), {s[0], s[1]}, {d[0] - 1, d[1] - 1}, {p[0], p[1]}, bias, *data_type_of(dtype)};
}

// The three primitive descriptors of one convolution configuration.
struct ConvPrimitives {
  dnnl::convolution_forward::primitive_desc forward;
  dnnl::convolution_backward_data::primitive_desc backward_data;
  dnnl::convolution_backward_weights::primitive_desc backward_weights;
  dnnl::convolution_forward forward_primitive;
  dnnl::convolution_backward_data backward_data_primitive;
  dnnl::convolution_backward_weights backward_weights_primitive;
};

ConvPrimitives make_primitives(const ConvKey& key) {
  const auto algorithm = dnnl::algorithm::convolution_direct;
  const auto any = [&key](const Dims& dims) { return dnnl_util::any(dims, key.type); };
  const memory::desc bias_md = key.bias ? any({key.dst[1]}) : memory::desc();
  dnnl::convolution_forward::desc forward(dnnl::prop_kind::forward_training, algorithm, any(key.src), any(key.weights), bias_md,
                                          any(key.dst), key.strides, key.dilates, key.padding, key.padding);
  auto forward_pd = dnnl::convolution_forward::primitive_desc(forward, user_scratchpad(), engine());
  dnnl::convolution_backward_data::desc data(algorithm, any(key.src), any(key.weights), any(key.dst), key.strides, key.dilates,
                                             key.padding, key.padding);
  auto data_pd = dnnl::convolution_backward_data::primitive_desc(data, user_scratchpad(), engine(), forward_pd);
  dnnl::convolution_backward_weights::desc weights(algorithm, any(key.src), any(key.weights), any(key.dst), key.strides,
                                                   key.dilates, key.padding, key.padding);
  auto weights_pd = dnnl::convolution_backward_weights::primitive_desc(weights, user_scratchpad(), engine(), forward_pd);
  return ConvPrimitives{forward_pd,
                        data_pd,
                        weights_pd,
                        dnnl::convolution_forward(forward_pd),
                        dnnl::convolution_backward_data(data_pd),
                        dnnl::convolution_backward_weights(weights_pd)};
}

// Whether oneDNN's bfloat16 kernels would read a neighbouring pixel for this configuration: they
// multiply input channels in pairs, and with an odd count per group (depthwise ones excepted) the
// last pair's second element is the next pixel's first channel times a zero weight, which makes
// NaN of an infinite or NaN input at a neighbouring output (float32 gives +-inf there).
bool pairs_with_neighbours(const ConvKey& key) {
  const bool grouped = key.weights.size() == 5;
  const int64_t in_per_group = grouped ? key.weights[2] : key.weights[1], out_per_group = grouped ? key.weights[1] : key.weights[0];
  const bool depthwise = grouped && in_per_group == 1 && out_per_group == 1;
  return in_per_group % 2 == 1 && !depthwise;
}

// The primitives of the configuration; for bfloat16, nullopt where oneDNN has no optimized kernel
// for one of the three on this CPU (float32 always has them) or where its kernels would pair
// channels across pixels (pairs_with_neighbours): those compute in float32.
std::shared_ptr<const std::optional<ConvPrimitives>> primitives(const ConvKey& key) {
  return cached_primitives<std::optional<ConvPrimitives>>(key, [](const ConvKey& key) -> std::optional<ConvPrimitives> {
    if (key.type == memory::data_type::f32) return make_primitives(key);
    if (pairs_with_neighbours(key)) return std::nullopt;
    try {
      ConvPrimitives p = make_primitives(key);
      for (const char* impl : {p.forward.impl_info_str(), p.backward_data.impl_info_str(), p.backward_weights.impl_info_str()}) {
        if (is_reference_implementation(impl)) return std::nullopt;
      }
      return p;
    } catch (const dnnl::error&) {
      return std::nullopt;
    }
  });
}

// Input channels per group below which float32 weight gradients skip oneDNN's AVX2 kernels (see
// backward_weights_kernel).
constexpr int64_t kMinBlockedChannels = 8;

// The shape for shallow_conv_forward/_grad_weight where they take the call (conv_shallow.h).
std::optional<ShallowConvShape> shallow_shape(const Shape& x, const Shape& w, const Shape& y, const Attrs& attrs) {
  const Pair &s = attrs.get<Pair>("stride"), &p = attrs.get<Pair>("padding"), &d = attrs.get<Pair>("dilation");
  if (attrs.get<int64_t>("groups") != 1 || s != Pair{1, 1} || d != Pair{1, 1}) return std::nullopt;
  const ShallowConvShape shape{x[0], x[1], x[2], x[3], y[1], y[2], y[3], w[2], w[3], p[0], p[1]};
  if (!shallow_conv_supports(shape)) return std::nullopt;
  return shape;
}

template <typename T>
const T* data_of(const Tensor& t) {
  return static_cast<const T*>(t.data_ptr());
}

// Only the batch may be empty (conv2d's inference refuses the rest); oneDNN wants none empty.
void forward_kernel(KernelContext& ctx) {
  const Tensor &x = ctx.inputs[0], &w = ctx.inputs[1];
  Tensor& y = ctx.outputs[0];
  if (y.numel() == 0) return;
  const bool has_bias = ctx.inputs.size() == 3;
  if (const std::optional<ShallowConvShape> shallow = shallow_shape(x.shape(), w.shape(), y.shape(), ctx.attrs)) {
    const auto run = [&]<typename T>() {
      shallow_conv_forward<T>(*shallow, data_of<T>(x), data_of<T>(w), has_bias ? data_of<T>(ctx.inputs[2]) : nullptr, static_cast<T*>(y.data_ptr()));
    };
    return x.dtype() == kFloat32 ? run.operator()<float>() : run.operator()<BFloat16>();
  }
  const ConvKey key = make_key(x.shape(), w.shape(), y.shape(), ctx.attrs, has_bias, x.dtype());
  const auto found = primitives(key);  // held while it runs: another thread may evict it
  if (!*found) return in_float32<forward_kernel>(ctx);
  const ConvPrimitives& p = **found;
  dnnl::stream stream = stream_for_call();
  Bound src = bind_memory(key.src, x.data_ptr(), p.forward.src_desc(), stream, true);
  Bound weights = bind_memory(key.weights, w.data_ptr(), p.forward.weights_desc(), stream, true);
  Bound dst = bind_memory(key.dst, y.data_ptr(), p.forward.dst_desc(), stream, false);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src.inner}, {DNNL_ARG_WEIGHTS, weights.inner}, {DNNL_ARG_DST, dst.inner}};
  if (has_bias) args.emplace(DNNL_ARG_BIAS, memory(p.forward.bias_desc(), engine(), ctx.inputs[2].data_ptr()));
  run_primitive(p.forward_primitive, stream, std::move(args));
  write_back(dst, stream);
  stream.wait();
}

void backward_data_kernel(KernelContext& ctx) {
  const Tensor &grad = ctx.inputs[0], &w = ctx.inputs[1];
  Tensor& grad_input = ctx.outputs[0];
  if (grad_input.numel() == 0) return;
  const ConvKey key = make_key(grad_input.shape(), w.shape(), grad.shape(), ctx.attrs, false, grad.dtype());
  const auto found = primitives(key);  // held while it runs: another thread may evict it
  if (!*found) return in_float32<backward_data_kernel>(ctx);
  const ConvPrimitives& p = **found;
  dnnl::stream stream = stream_for_call();
  Bound diff_dst = bind_memory(key.dst, grad.data_ptr(), p.backward_data.diff_dst_desc(), stream, true);
  Bound weights = bind_memory(key.weights, w.data_ptr(), p.backward_data.weights_desc(), stream, true);
  Bound diff_src = bind_memory(key.src, grad_input.data_ptr(), p.backward_data.diff_src_desc(), stream, false);
  run_primitive(p.backward_data_primitive, stream, {{DNNL_ARG_DIFF_DST, diff_dst.inner}, {DNNL_ARG_WEIGHTS, weights.inner},
                                                    {DNNL_ARG_DIFF_SRC, diff_src.inner}});
  write_back(diff_src, stream);
  stream.wait();
}

void backward_weights_kernel(KernelContext& ctx) {
  const Tensor &grad = ctx.inputs[0], &x = ctx.inputs[1];
  Tensor& grad_weight = ctx.outputs[0];
  if (x.numel() == 0) {  // an empty batch contributes nothing
    std::memset(grad_weight.data_ptr(), 0, static_cast<size_t>(grad_weight.nbytes()));
    return;
  }
  if (const std::optional<ShallowConvShape> shallow = shallow_shape(x.shape(), grad_weight.shape(), grad.shape(), ctx.attrs)) {
    const auto run = [&]<typename T>() {
      shallow_conv_grad_weight<T>(*shallow, data_of<T>(grad), data_of<T>(x), static_cast<T*>(grad_weight.data_ptr()));
    };
    return grad.dtype() == kFloat32 ? run.operator()<float>() : run.operator()<BFloat16>();
  }
  // Below AVX-512, oneDNN's blocked layouts pad the input channels to 8: with fewer (an image's
  // 1-3) its backward-weights does several times the work. On an AMD EPYC (AVX2) the LeNet's
  // 1-channel layer took 4.5 ms in oneDNN and 1.06 ms as im2col + GEMM (one thread); on the GPU
  // machine's Xeon (AVX-512) oneDNN's took 0.9 ms and im2col + GEMM 4.1.
  if (grad.dtype() == kFloat32 && !has_avx512_core() && x.size(1) / ctx.attrs.get<int64_t>("groups") < kMinBlockedChannels) {
    return conv_grad_weight_by_gemm(ctx);
  }
  const ConvKey key = make_key(x.shape(), grad_weight.shape(), grad.shape(), ctx.attrs, false, grad.dtype());
  const auto found = primitives(key);  // held while it runs: another thread may evict it
  if (!*found) return in_float32<backward_weights_kernel>(ctx);
  const ConvPrimitives& p = **found;
  dnnl::stream stream = stream_for_call();
  Bound diff_dst = bind_memory(key.dst, grad.data_ptr(), p.backward_weights.diff_dst_desc(), stream, true);
  Bound src = bind_memory(key.src, x.data_ptr(), p.backward_weights.src_desc(), stream, true);
  Bound diff_weights = bind_memory(key.weights, grad_weight.data_ptr(), p.backward_weights.diff_weights_desc(), stream, false);
  run_primitive(p.backward_weights_primitive, stream, {{DNNL_ARG_DIFF_DST, diff_dst.inner}, {DNNL_ARG_SRC, src.inner},
                                                       {DNNL_ARG_DIFF_WEIGHTS, diff_weights.inner}});
  write_back(diff_weights, stream);
  stream.wait();
}

const std::vector<DType> kDnnlDtypes = {kFloat32, kBFloat16};
FLOW_REGISTER_KERNEL("conv2d", DeviceType::kCPU, kDnnlDtypes, forward_kernel);
FLOW_REGISTER_KERNEL("conv2d_grad_input", DeviceType::kCPU, kDnnlDtypes, backward_data_kernel);
FLOW_REGISTER_KERNEL("conv2d_grad_weight", DeviceType::kCPU, kDnnlDtypes, backward_weights_kernel);

}  // namespace
}  // namespace flow::cpu
