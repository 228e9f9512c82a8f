// float32 2-d pooling through oneDNN over plain NCHW buffers: max pooling and average pooling with
// the padding counted, forward and backward. Primitive descriptors are cached per configuration.
//
// max_pool2d's `indices` output holds flat h*w argmax positions (what max_pool2d_grad consumes
// and what the float64 loops produce). oneDNN's training workspace holds, per output, the offset
// of the first maximum inside the kernel window (ky * kw + kx), so the forward turns the
// workspace into indices and the backward turns indices back into a workspace. oneDNN ignores
// NaN and starts from the lowest finite value where flow propagates NaN and keeps -inf, so planes
// where the two could differ are recomputed with the loops. max_pool2d_inference (values only)
// runs flow's blocked loop instead (pool_loop.h).
#include <glog/logging.h>

#include <cmath>

#include "core/kernels/cpu/dnnl_util.h"
#include "core/kernels/cpu/pool_loop.h"

namespace flow::cpu {
namespace {

using namespace dnnl_util;
using Pair = std::vector<int64_t>;

struct PoolKey {
  Dims src, dst, kernel, strides, padding;
  dnnl::algorithm algorithm;
  auto tie() const { return std::tie(src, dst, kernel, strides, padding, algorithm); }
  bool operator<(const PoolKey& other) const { return tie() < other.tie(); }
};

PoolKey make_key(const Shape& x, const Shape& y, const Attrs& attrs, dnnl::algorithm algorithm) {
  const Pair &k = attrs.get<Pair>("kernel_size"), &s = attrs.get<Pair>("stride"), &p = attrs.get<Pair>("padding");
  return {Dims(x.begin(), x.end()), Dims(y.begin(), y.end()), k, s, p, algorithm};
}

struct PoolPrimitives {
  dnnl::pooling_forward::primitive_desc forward;
  dnnl::pooling_forward forward_primitive;
  dnnl::pooling_backward::primitive_desc backward;
  dnnl::pooling_backward backward_primitive;
};

// Symmetric padding: with floor division the last window never needs more on the right.
PoolPrimitives make_primitives(const PoolKey& key, const memory::desc& src, const memory::desc& dst) {
  dnnl::pooling_forward::desc forward(dnnl::prop_kind::forward_training, key.algorithm, src, dst, key.strides, key.kernel, key.padding, key.padding);
  auto forward_pd = dnnl::pooling_forward::primitive_desc(forward, user_scratchpad(), engine());
  dnnl::pooling_backward::desc backward(key.algorithm, forward_pd.src_desc(), forward_pd.dst_desc(), key.strides, key.kernel, key.padding,
                                        key.padding);
  auto backward_pd = dnnl::pooling_backward::primitive_desc(backward, user_scratchpad(), engine(), forward_pd);
  return {forward_pd, dnnl::pooling_forward(forward_pd), backward_pd, dnnl::pooling_backward(backward_pd)};
}

// On plain NCHW, oneDNN 2.6 has JIT pooling only with AVX-512; elsewhere it falls back to a
// generic loop several times slower than reordering to the channel-blocked layout (nChw8c),
// pooling there with the JIT kernel and reordering back. The kernels bind their buffers through
// reorders whenever a primitive's layout is not plain.
PoolPrimitives& primitives(const PoolKey& key) {
  return cached_primitives<PoolPrimitives>(key, [](const PoolKey& key) {
    PoolPrimitives plain_layout = make_primitives(key, plain(key.src), plain(key.dst));
    const std::string implementation = plain_layout.forward.impl_info_str();
    if (implementation.rfind("jit", 0) == 0 || key.src.size() != 4) return plain_layout;
    const memory::desc blocked(key.src, memory::data_type::f32, memory::format_tag::aBcd8b);
    return make_primitives(key, blocked, any(key.dst));
  });
}

// The workspace (u8 or s32 window offsets) in the plain layout of the output.
memory::desc plain_workspace(const PoolPrimitives& p, const Dims& dst) { return plain(dst, p.forward.workspace_desc().data_type()); }

template <typename Fn>
void dispatch_workspace(memory::data_type type, Fn&& fn) {
  if (type == memory::data_type::u8) {
    fn(uint8_t{});
  } else {
    CHECK(type == memory::data_type::s32) << "unexpected oneDNN pooling workspace type";
    fn(int32_t{});
  }
}

bool has_nan(const float* values, int64_t count) {
  bool nan = false;
  for (int64_t i = 0; i < count; ++i) nan |= std::isnan(values[i]);
  return nan;
}

// Writes the flat argmax of each output of one plane; false when oneDNN's result may differ
// from the loops' (a NaN in the plane, or a maximum oneDNN did not take from the window).
template <typename Offset>
bool decode_plane(const PoolGeometry& g, const float* src, const float* out, const Offset* offsets, int64_t* indices) {
  if (has_nan(src, g.plane_in())) return false;
  for (int64_t y = 0; y < g.oh; ++y) {
    for (int64_t x = 0; x < g.ow; ++x) {
      const int64_t o = y * g.ow + x, offset = offsets[o];
      const int64_t iy = y * g.sh - g.ph + offset / g.kw, ix = x * g.sw - g.pw + offset % g.kw;
      if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w || src[iy * g.w + ix] != out[o]) return false;
      indices[o] = iy * g.w + ix;
    }
  }
  return true;
}

// The inverse of decode_plane: window offsets of one plane's argmax indices.
template <typename Offset>
void encode_plane(const PoolGeometry& g, const int64_t* indices, Offset* offsets) {
  for (int64_t y = 0; y < g.oh; ++y) {
    for (int64_t x = 0; x < g.ow; ++x) {
      const int64_t o = y * g.ow + x;
      const int64_t ky = indices[o] / g.w - (y * g.sh - g.ph), kx = indices[o] % g.w - (x * g.sw - g.pw);
      if (indices[o] < 0 || ky < 0 || ky >= g.kh || kx < 0 || kx >= g.kw) {
        fail("max_pool2d", "argmax index ", indices[o], " of output (", y, ", ", x, ") lies outside its pooling window");
      }
      offsets[o] = static_cast<Offset>(ky * g.kw + kx);
    }
  }
}

int64_t plane_grain(const PoolGeometry& g) { return std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(g.plane_in(), 1)); }

void max_pool_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  Tensor &y = ctx.outputs[0], &indices = ctx.outputs[1];
  if (y.numel() == 0) return;
  const PoolKey key = make_key(x.shape(), y.shape(), ctx.attrs, dnnl::algorithm::pooling_max);
  PoolPrimitives& p = primitives(key);
  dnnl::stream stream = stream_for_call();
  const memory::desc workspace_desc = plain_workspace(p, key.dst);
  std::vector<uint8_t> workspace_buffer(workspace_desc.get_size());
  Bound workspace = bind_memory(workspace_desc, workspace_buffer.data(), p.forward.workspace_desc(), stream, false);
  Bound src = bind_memory(key.src, x.data_ptr(), p.forward.src_desc(), stream, true);
  Bound dst = bind_memory(key.dst, y.data_ptr(), p.forward.dst_desc(), stream, false);
  run_primitive(p.forward_primitive, stream, {{DNNL_ARG_SRC, src.inner}, {DNNL_ARG_DST, dst.inner}, {DNNL_ARG_WORKSPACE, workspace.inner}});
  write_back(dst, stream);
  write_back(workspace, stream);
  stream.wait();

  const PoolGeometry g = pool_geometry(x.shape(), y.shape(), ctx.attrs);
  const float* in = x.data_ptr<float>();
  float* out = y.data_ptr<float>();
  int64_t* argmax = indices.data_ptr<int64_t>();
  dispatch_workspace(workspace_desc.data_type(), [&](auto offset_type) {
    const auto* offsets = reinterpret_cast<const decltype(offset_type)*>(workspace_buffer.data());
    parallel_for(0, g.planes, plane_grain(g), [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const float* src = in + plane * g.plane_in();
        const int64_t first = plane * g.plane_out();
        if (!decode_plane(g, src, out + first, offsets + first, argmax + first)) max_pool_plane(g, src, out + first, argmax + first);
      }
    });
  });
}

// y = pool(x) by the key's forward primitive, for pooling that needs no workspace.
void run_forward(const PoolKey& key, const Tensor& x, Tensor& y) {
  PoolPrimitives& p = primitives(key);
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

void max_pool_grad_kernel(KernelContext& ctx) {
  const Tensor &grad = ctx.inputs[0], &indices = ctx.inputs[1];
  Tensor& grad_input = ctx.outputs[0];
  if (grad_input.numel() == 0) return;
  const PoolKey key = make_key(grad_input.shape(), grad.shape(), ctx.attrs, dnnl::algorithm::pooling_max);
  PoolPrimitives& p = primitives(key);
  const PoolGeometry g = pool_geometry(grad_input.shape(), grad.shape(), ctx.attrs);
  const memory::desc workspace_desc = plain_workspace(p, key.dst);
  std::vector<uint8_t> workspace_buffer(workspace_desc.get_size());
  const int64_t* argmax = indices.data_ptr<int64_t>();
  dispatch_workspace(workspace_desc.data_type(), [&](auto offset_type) {
    auto* offsets = reinterpret_cast<decltype(offset_type)*>(workspace_buffer.data());
    parallel_for(0, g.planes, plane_grain(g), [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) encode_plane(g, argmax + plane * g.plane_out(), offsets + plane * g.plane_out());
    });
  });
  dnnl::stream stream = stream_for_call();
  Bound workspace = bind_memory(workspace_desc, workspace_buffer.data(), p.backward.workspace_desc(), stream, true);
  Bound diff_dst = bind_memory(key.dst, grad.data_ptr(), p.backward.diff_dst_desc(), stream, true);
  Bound diff_src = bind_memory(key.src, grad_input.data_ptr(), p.backward.diff_src_desc(), stream, false);
  run_primitive(p.backward_primitive, stream, {{DNNL_ARG_DIFF_DST, diff_dst.inner}, {DNNL_ARG_WORKSPACE, workspace.inner}, {DNNL_ARG_DIFF_SRC, diff_src.inner}});
  write_back(diff_src, stream);
  stream.wait();
}

void avg_pool_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  Tensor& y = ctx.outputs[0];
  if (y.numel() == 0) return;
  run_forward(make_key(x.shape(), y.shape(), ctx.attrs, dnnl::algorithm::pooling_avg_include_padding), x, y);
}

void avg_pool_grad_kernel(KernelContext& ctx) {
  const Tensor& grad = ctx.inputs[0];
  Tensor& grad_input = ctx.outputs[0];
  if (grad_input.numel() == 0) return;
  const PoolKey key = make_key(grad_input.shape(), grad.shape(), ctx.attrs, dnnl::algorithm::pooling_avg_include_padding);
  PoolPrimitives& p = primitives(key);
  dnnl::stream stream = stream_for_call();
  Bound diff_dst = bind_memory(key.dst, grad.data_ptr(), p.backward.diff_dst_desc(), stream, true);
  Bound diff_src = bind_memory(key.src, grad_input.data_ptr(), p.backward.diff_src_desc(), stream, false);
  run_primitive(p.backward_primitive, stream, {{DNNL_ARG_DIFF_DST, diff_dst.inner}, {DNNL_ARG_DIFF_SRC, diff_src.inner}});
  write_back(diff_src, stream);
  stream.wait();
}

FLOW_REGISTER_KERNEL("max_pool2d", DeviceType::kCPU, {kFloat32}, max_pool_kernel);
FLOW_REGISTER_KERNEL("max_pool2d_inference", DeviceType::kCPU, {kFloat32}, max_pool_inference_kernel);
FLOW_REGISTER_KERNEL("max_pool2d_grad", DeviceType::kCPU, {kFloat32}, max_pool_grad_kernel);
FLOW_REGISTER_KERNEL("avg_pool2d", DeviceType::kCPU, {kFloat32}, avg_pool_kernel);
FLOW_REGISTER_KERNEL("avg_pool2d_grad", DeviceType::kCPU, {kFloat32}, avg_pool_grad_kernel);

}  // namespace
}  // namespace flow::cpu
