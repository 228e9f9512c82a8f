// float32 2-d pooling through oneDNN over plain NCHW buffers: average pooling with the padding
// counted, forward and backward. Primitive descriptors are cached per configuration.
//
// Max pooling does not run on oneDNN: with indices (training) it runs flow's window loops
// (pool.cpp), values only (max_pool2d_inference) flow's channel-blocked loop (pool_loop.h).
// oneDNN 2.6's AVX2 max pooling measured slower than either on 64x32x26x26 (2x2 windows, one
// thread, in a Graph: forward 5.6 ms against the loops' 3.2, backward 4.7 ms against 0.84),
// ignores NaN where flow propagates it, and keeps its argmax in a workspace of its own that had
// to be converted to and from flow's indices on every call.
#include "core/kernels/cpu/dnnl_util.h"
#include "core/kernels/cpu/pool_loop.h"

namespace flow::cpu {
namespace {

using namespace dnnl_util;
using Pair = std::vector<int64_t>;

struct PoolKey {
  Dims src, dst, kernel, strides, padding;
  auto tie() const { return std::tie(src, dst, kernel, strides, padding); }
  bool operator<(const PoolKey& other) const { return tie() < other.tie(); }
};

PoolKey make_key(const Shape& x, const Shape& y, const Attrs& attrs) {
  const Pair &k = attrs.get<Pair>("kernel_size"), &s = attrs.get<Pair>("stride"), &p = attrs.get<Pair>("padding");
  return {Dims(x.begin(), x.end()), Dims(y.begin(), y.end()), k, s, p};
}

constexpr auto kAverage = dnnl::algorithm::pooling_avg_include_padding;

struct PoolPrimitives {
  dnnl::pooling_forward::primitive_desc forward;
  dnnl::pooling_forward forward_primitive;
  dnnl::pooling_backward::primitive_desc backward;
  dnnl::pooling_backward backward_primitive;
};

// Symmetric padding: with floor division the last window never needs more on the right.
PoolPrimitives make_primitives(const PoolKey& key, const memory::desc& src, const memory::desc& dst) {
  dnnl::pooling_forward::desc forward(dnnl::prop_kind::forward_training, kAverage, src, dst, key.strides, key.kernel, key.padding, key.padding);
  auto forward_pd = dnnl::pooling_forward::primitive_desc(forward, user_scratchpad(), engine());
  dnnl::pooling_backward::desc backward(kAverage, forward_pd.src_desc(), forward_pd.dst_desc(), key.strides, key.kernel, key.padding,
                                        key.padding);
  auto backward_pd = dnnl::pooling_backward::primitive_desc(backward, user_scratchpad(), engine(), forward_pd);
  return {forward_pd, dnnl::pooling_forward(forward_pd), backward_pd, dnnl::pooling_backward(backward_pd)};
}

// On plain NCHW, oneDNN 2.6 has JIT pooling only with AVX-512; elsewhere it falls back to a
// generic loop several times slower than reordering to the channel-blocked layout (nChw8c),
// pooling there with the JIT kernel and reordering back. The kernels bind their buffers through
// reorders whenever a primitive's layout is not plain.
std::shared_ptr<const PoolPrimitives> primitives(const PoolKey& key) {
  return cached_primitives<PoolPrimitives>(key, [](const PoolKey& key) {
    PoolPrimitives plain_layout = make_primitives(key, plain(key.src), plain(key.dst));
    const std::string implementation = plain_layout.forward.impl_info_str();
    if (implementation.rfind("jit", 0) == 0 || key.src.size() != 4) return plain_layout;
    const memory::desc blocked(key.src, memory::data_type::f32, memory::format_tag::aBcd8b);
    return make_primitives(key, blocked, any(key.dst));
  });
}

// y = pool(x) by the key's forward primitive, for pooling that needs no workspace.
void run_forward(const PoolKey& key, const Tensor& x, Tensor& y) {
  const ThreadCapScope cap(elementwise_threads(x.numel()));
  const auto cached = primitives(key);  // held while it runs: another thread may evict it
  const PoolPrimitives& p = *cached;
  dnnl::stream stream = stream_for_call();
  Bound src = bind_memory(key.src, x.data_ptr(), p.forward.src_desc(), stream, true);
  Bound dst = bind_memory(key.dst, y.data_ptr(), p.forward.dst_desc(), stream, false);
  run_primitive(p.forward_primitive, stream, {{DNNL_ARG_SRC, src.inner}, {DNNL_ARG_DST, dst.inner}});
  write_back(dst, stream);
  stream.wait();
}

// Values only: flow's loop over channel blocks (nChw8c, reordered to and from by oneDNN; planes
// as they are below 8 channels), which defines NaN and -inf as flow does and measured 7x faster
// than oneDNN's AVX2 pooling on this machine (pool_loop.h).
void max_pool_inference_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  Tensor& y = ctx.outputs[0];
  if (y.numel() == 0) return;
  if (x.size(1) < 8) {
    max_pool_blocked(pool_geometry(x.shape(), y.shape(), ctx.attrs), 1, x.data_ptr<float>(), y.data_ptr<float>());
    return;
  }
  const Dims src(x.shape().begin(), x.shape().end()), dst(y.shape().begin(), y.shape().end());
  dnnl::stream stream = stream_for_call();
  Bound in = bind_memory(src, x.data_ptr(), memory::desc(src, memory::data_type::f32, memory::format_tag::aBcd8b), stream, true);
  Bound out = bind_memory(dst, y.data_ptr(), memory::desc(dst, memory::data_type::f32, memory::format_tag::aBcd8b), stream, false);
  stream.wait();
  max_pool_blocked(blocked_pool_geometry(x.shape(), y.shape(), ctx.attrs, 8), 8, static_cast<const float*>(in.inner.get_data_handle()),
                   static_cast<float*>(out.inner.get_data_handle()));
  write_back(out, stream);
  stream.wait();
}

void avg_pool_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  Tensor& y = ctx.outputs[0];
  if (y.numel() == 0) return;
  run_forward(make_key(x.shape(), y.shape(), ctx.attrs), x, y);
}

void avg_pool_grad_kernel(KernelContext& ctx) {
  const Tensor& grad = ctx.inputs[0];
  Tensor& grad_input = ctx.outputs[0];
  if (grad_input.numel() == 0) return;
  const PoolKey key = make_key(grad_input.shape(), grad.shape(), ctx.attrs);
  const ThreadCapScope cap(elementwise_threads(grad_input.numel()));
  const auto cached = primitives(key);  // held while it runs: another thread may evict it
  const PoolPrimitives& p = *cached;
  dnnl::stream stream = stream_for_call();
  Bound diff_dst = bind_memory(key.dst, grad.data_ptr(), p.backward.diff_dst_desc(), stream, true);
  Bound diff_src = bind_memory(key.src, grad_input.data_ptr(), p.backward.diff_src_desc(), stream, false);
  run_primitive(p.backward_primitive, stream, {{DNNL_ARG_DIFF_DST, diff_dst.inner}, {DNNL_ARG_DIFF_SRC, diff_src.inner}});
  write_back(diff_src, stream);
  stream.wait();
}

FLOW_REGISTER_KERNEL("max_pool2d_inference", DeviceType::kCPU, {kFloat32}, max_pool_inference_kernel);
FLOW_REGISTER_KERNEL("avg_pool2d", DeviceType::kCPU, {kFloat32}, avg_pool_kernel);
FLOW_REGISTER_KERNEL("avg_pool2d_grad", DeviceType::kCPU, {kFloat32}, avg_pool_grad_kernel);

}  // namespace
}  // namespace flow::cpu
