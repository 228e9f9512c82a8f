// Pooling as window loops over each (H, W) plane, planes split over the thread pool: max pooling
// with argmax indices and its gradient in float32, float64 and bfloat16, average pooling in
// float64 (float32 average pooling and values-only max pooling: pool_dnnl.cpp).
#include <cstring>

#include "core/kernels/cpu/dnnl_util.h"
#include "core/kernels/cpu/pool_loop.h"
#include "core/kernels/cpu/reduced_float.h"
#include "core/thread_pool.h"

namespace flow::cpu {
namespace {

int64_t plane_grain(const PoolGeometry& g) { return std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(g.plane_in(), 1)); }

// max_pool2d, or max_pool2d_inference (no indices output).
template <typename T>
void max_pool(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const PoolGeometry g = pool_geometry(x.shape(), ctx.outputs[0].shape(), ctx.attrs);
  const T* in = static_cast<const T*>(x.data_ptr());
  T* out = static_cast<T*>(ctx.outputs[0].data_ptr());
  int64_t* indices = ctx.outputs.size() > 1 ? static_cast<int64_t*>(ctx.outputs[1].data_ptr()) : nullptr;
  const bool avx512 = dnnl_util::has_avx512_core();
  with_fixed_window(g, [&]<int Kh, int Kw>() {
    parallel_for(0, g.planes, plane_grain(g), [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        max_pool_plane<T, Kh, Kw>(g, in + plane * g.plane_in(), out + plane * g.plane_out(), indices ? indices + plane * g.plane_out() : nullptr,
                                  avx512);
      }
    });
  });
}

// The input gradient of one plane: zeros, plus each output's gradient at its argmax.
template <typename T>
void max_pool_grad_scatter(const PoolGeometry& g, const T* dy, const int64_t* idx, T* dx) {
  std::memset(static_cast<void*>(dx), 0, sizeof(T) * static_cast<size_t>(g.plane_in()));  // +0 has no bits set in every floating type
  for (int64_t o = 0; o < g.plane_out(); ++o) {
    const int64_t i = idx[o];
    if (i < 0 || i >= g.plane_in()) fail("max_pool2d", "argmax index ", i, " lies outside the input plane of ", g.plane_in(), " values");
    if constexpr (std::is_same_v<T, BFloat16>) {
      // Most inputs get one gradient (or none): +0 + v is v (but for v = -0), with no rounding.
      dx[i] = dx[i].bits == 0 && dy[o].bits != 0x8000 ? dy[o] : BFloat16(static_cast<float>(dx[i]) + static_cast<float>(dy[o]));
    } else {
      dx[i] = dx[i] + dy[o];
    }
  }
}

// Planes are zeroed by the threads that scatter into them: a zero fill of the whole input
// gradient first, on one thread, kept 4 threads at the speed of one on the LeNet pools.
template <typename T>
void max_pool_grad(KernelContext& ctx) {
  const Tensor &grad = ctx.inputs[0], &indices = ctx.inputs[1];
  Tensor& gx = ctx.outputs[0];
  const PoolGeometry g = pool_geometry(gx.shape(), grad.shape(), ctx.attrs);
  const T* dy = static_cast<const T*>(grad.data_ptr());
  const int64_t* idx = static_cast<const int64_t*>(indices.data_ptr());
  T* dx = static_cast<T*>(gx.data_ptr());
  // Rows of fewer than 8 windows scatter faster (LeNet's 64x64x11x11 pool, 5 windows a row: 56 us
  // scattered, 72 by window; its 64x32x26x26 pool, 13 a row: 165 and 107 us, at 2 threads).
  constexpr bool kHasWindowKernel = std::is_same_v<T, float> || std::is_same_v<T, BFloat16>;
  [[maybe_unused]] const bool by_window = kHasWindowKernel && g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.ph == 0 && g.pw == 0 &&
                                          g.ow >= 8 && g.plane_in() < INT32_MAX && dnnl_util::has_avx512_core();
  parallel_for(0, g.planes, plane_grain(g), [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const T* plane_dy = dy + plane * g.plane_out();
      const int64_t* plane_idx = idx + plane * g.plane_out();
      T* plane_dx = dx + plane * g.plane_in();
      if constexpr (kHasWindowKernel) {
        if (by_window && max_pool_grad_plane_2x2_avx512(g, plane_dy, plane_idx, plane_dx)) continue;
      }
      max_pool_grad_scatter(g, plane_dy, plane_idx, plane_dx);
    }
  });
}

void max_pool_kernel(KernelContext& ctx) {
  FLOW_DISPATCH_FLOATING(ctx.inputs[0].dtype(), "max_pool2d", [&]<typename T>() { max_pool<T>(ctx); });
}

void max_pool_grad_kernel(KernelContext& ctx) {
  FLOW_DISPATCH_FLOATING(ctx.inputs[0].dtype(), "max_pool2d", [&]<typename T>() { max_pool_grad<T>(ctx); });
}

// Selecting the maximum is exact in bfloat16: the float32 kernel's values and indices on the
// widened input, without widening it and rounding the result.
void max_pool_bf16_kernel(KernelContext& ctx) { max_pool<BFloat16>(ctx); }

// Windows that do not overlap give each input at most one gradient, which bfloat16 holds exactly;
// overlapping ones sum in float32 and round once.
void max_pool_grad_bf16_kernel(KernelContext& ctx) {
  const PoolGeometry g = pool_geometry(ctx.outputs[0].shape(), ctx.inputs[0].shape(), ctx.attrs);
  if (g.sh >= g.kh && g.sw >= g.kw) {
    max_pool_grad<BFloat16>(ctx);
  } else {
    in_float32<max_pool_grad_kernel>(ctx);
  }
}

// Forward: out = mean of the window (padding counted); backward: each window's gradient spread
// evenly over it.
template <bool backward>
void avg_pool_kernel(KernelContext& ctx) {
  const Tensor& src_tensor = ctx.inputs[0];
  Tensor& dst_tensor = ctx.outputs[0];
  const Shape& in_shape = backward ? dst_tensor.shape() : src_tensor.shape();
  const Shape& out_shape = backward ? src_tensor.shape() : dst_tensor.shape();
  const PoolGeometry g = pool_geometry(in_shape, out_shape, ctx.attrs);
  FLOW_DISPATCH_FLOATING(src_tensor.dtype(), "avg_pool2d", [&]<typename T>() {
    const T scale = T(1) / static_cast<T>(g.kh * g.kw);
    const T* src = static_cast<const T*>(src_tensor.data_ptr());
    T* dst = static_cast<T*>(dst_tensor.data_ptr());
    if (backward) std::memset(dst, 0, static_cast<size_t>(dst_tensor.numel()) * sizeof(T));
    parallel_for(0, g.planes, plane_grain(g), [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const int64_t base = plane * g.plane_in();
        for (int64_t y = 0; y < g.oh; ++y) {
          const WindowRange rows = window(y, g.sh, g.ph, g.kh, g.h);
          for (int64_t x0 = 0; x0 < g.ow; ++x0) {
            const WindowRange cols = window(x0, g.sw, g.pw, g.kw, g.w);
            const int64_t o = (plane * g.oh + y) * g.ow + x0;
            if constexpr (backward) {
              const T share = src[o] * scale;
              for (int64_t iy = rows.begin; iy < rows.end; ++iy) {
                for (int64_t ix = cols.begin; ix < cols.end; ++ix) dst[base + iy * g.w + ix] += share;
              }
            } else {
              T total = 0;
              for (int64_t iy = rows.begin; iy < rows.end; ++iy) {
                for (int64_t ix = cols.begin; ix < cols.end; ++ix) total += src[base + iy * g.w + ix];
              }
              dst[o] = total * scale;
            }
          }
        }
      }
    });
  });
}

const std::vector<DType> kMaxPoolDtypes{kFloat32, kFloat64};
FLOW_REGISTER_KERNEL("max_pool2d", DeviceType::kCPU, kMaxPoolDtypes, max_pool_kernel);
FLOW_REGISTER_KERNEL("max_pool2d_inference", DeviceType::kCPU, {kFloat64}, max_pool_kernel);
FLOW_REGISTER_KERNEL("max_pool2d_grad", DeviceType::kCPU, kMaxPoolDtypes, max_pool_grad_kernel);
FLOW_REGISTER_KERNEL("max_pool2d", DeviceType::kCPU, {kBFloat16}, max_pool_bf16_kernel);
FLOW_REGISTER_KERNEL("max_pool2d_inference", DeviceType::kCPU, {kBFloat16}, max_pool_bf16_kernel);
FLOW_REGISTER_KERNEL("max_pool2d_grad", DeviceType::kCPU, {kBFloat16}, max_pool_grad_bf16_kernel);
FLOW_REGISTER_KERNEL("avg_pool2d", DeviceType::kCPU, {kFloat64}, avg_pool_kernel<false>);
FLOW_REGISTER_KERNEL("avg_pool2d_grad", DeviceType::kCPU, {kFloat64}, avg_pool_kernel<true>);

}  // namespace
}  // namespace flow::cpu
