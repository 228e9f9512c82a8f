// float64 convolution as im2col + BLAS GEMM per image and group (forward, and both gradients
// via col2im and GEMM), and pooling over windows. Images are split over the thread pool, each one's
// GEMM running single-threaded so the split does not oversubscribe.
#include <cblas.h>

#include <cstring>
#include <limits>

#include "core/op.h"
#include "core/thread_pool.h"

namespace flow::cpu {
namespace {

using Pair = std::vector<int64_t>;

struct ConvGeometry {
  int64_t n, c, h, w;      // input
  int64_t o, kh, kw;       // weight (o, c / groups, kh, kw)
  int64_t oh, ow;          // output spatial
  int64_t sh, sw, ph, pw, dh, dw, groups;
  int64_t cg() const { return c / groups; }
  int64_t og() const { return o / groups; }
  int64_t patch() const { return cg() * kh * kw; }
  int64_t pixels() const { return oh * ow; }
};

ConvGeometry geometry(const Shape& x, const Shape& w, const Shape& y, const Attrs& attrs) {
  const Pair &s = attrs.get<Pair>("stride"), &p = attrs.get<Pair>("padding"), &d = attrs.get<Pair>("dilation");
  return {x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3], s[0], s[1], p[0], p[1], d[0], d[1], attrs.get<int64_t>("groups")};
}

// cols (patch, pixels) of one image's group g.
template <typename T>
void im2col(const ConvGeometry& g, const T* image, int64_t group, T* cols) {
  for (int64_t ci = 0; ci < g.cg(); ++ci) {
    const T* plane = image + (group * g.cg() + ci) * g.h * g.w;
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        T* row = cols + ((ci * g.kh + ki) * g.kw + kj) * g.pixels();
        for (int64_t y = 0; y < g.oh; ++y) {
          const int64_t iy = y * g.sh - g.ph + ki * g.dh;
          for (int64_t x = 0; x < g.ow; ++x) {
            const int64_t ix = x * g.sw - g.pw + kj * g.dw;
            row[y * g.ow + x] = (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) ? plane[iy * g.w + ix] : T(0);
          }
        }
      }
    }
  }
}

// Adds cols back into the image (the adjoint of im2col).
template <typename T>
void col2im(const ConvGeometry& g, const T* cols, int64_t group, T* image) {
  for (int64_t ci = 0; ci < g.cg(); ++ci) {
    T* plane = image + (group * g.cg() + ci) * g.h * g.w;
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const T* row = cols + ((ci * g.kh + ki) * g.kw + kj) * g.pixels();
        for (int64_t y = 0; y < g.oh; ++y) {
          const int64_t iy = y * g.sh - g.ph + ki * g.dh;
          if (iy < 0 || iy >= g.h) continue;
          for (int64_t x = 0; x < g.ow; ++x) {
            const int64_t ix = x * g.sw - g.pw + kj * g.dw;
            if (ix >= 0 && ix < g.w) plane[iy * g.w + ix] += row[y * g.ow + x];
          }
        }
      }
    }
  }
}

template <typename T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  const auto trans_a = ta ? CblasTrans : CblasNoTrans, trans_b = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>) cblas_sgemm(CblasRowMajor, trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
  else cblas_dgemm(CblasRowMajor, trans_a, trans_b, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
}

// Runs fn(image) for every image, images spread over the pool with BLAS kept on one thread each.
void for_each_image(int64_t images, const std::function<void(int64_t)>& fn) {
  const int threads = get_num_threads();
  if (images >= threads && threads > 1) {
    openblas_set_num_threads(1);
    try {
      parallel_for(0, images, 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) fn(i);
      });
    } catch (...) {
      openblas_set_num_threads(threads);
      throw;
    }
    openblas_set_num_threads(threads);
  } else {
    for (int64_t i = 0; i < images; ++i) fn(i);
  }
}

void conv_kernel(KernelContext& ctx) {
  const Tensor &x = ctx.inputs[0], &w = ctx.inputs[1];
  Tensor& y = ctx.outputs[0];
  const ConvGeometry g = geometry(x.shape(), w.shape(), y.shape(), ctx.attrs);
  FLOW_DISPATCH_FLOATING(x.dtype(), "conv2d", [&]<typename T>() {
    const T* in = static_cast<const T*>(x.data_ptr());
    const T* weight = static_cast<const T*>(w.data_ptr());
    const T* bias = ctx.inputs.size() == 3 ? static_cast<const T*>(ctx.inputs[2].data_ptr()) : nullptr;
    T* out = static_cast<T*>(y.data_ptr());
    for_each_image(g.n, [&](int64_t n) {
      std::vector<T> cols(static_cast<size_t>(g.patch() * g.pixels()));
      for (int64_t group = 0; group < g.groups; ++group) {
        im2col(g, in + n * g.c * g.h * g.w, group, cols.data());
        gemm<T>(false, false, g.og(), g.pixels(), g.patch(), weight + group * g.og() * g.patch(), g.patch(), cols.data(), g.pixels(),
                T(0), out + (n * g.o + group * g.og()) * g.pixels(), g.pixels());
      }
      if (bias) {
        for (int64_t oc = 0; oc < g.o; ++oc) {
          T* plane = out + (n * g.o + oc) * g.pixels();
          for (int64_t p = 0; p < g.pixels(); ++p) plane[p] += bias[oc];
        }
      }
    });
  });
}

void conv_grad_input_kernel(KernelContext& ctx) {
  const Tensor &grad = ctx.inputs[0], &w = ctx.inputs[1];
  Tensor& gx = ctx.outputs[0];
  const ConvGeometry g = geometry(gx.shape(), w.shape(), grad.shape(), ctx.attrs);
  FLOW_DISPATCH_FLOATING(grad.dtype(), "conv2d", [&]<typename T>() {
    const T* dy = static_cast<const T*>(grad.data_ptr());
    const T* weight = static_cast<const T*>(w.data_ptr());
    T* dx = static_cast<T*>(gx.data_ptr());
    std::memset(dx, 0, static_cast<size_t>(gx.numel()) * sizeof(T));
    for_each_image(g.n, [&](int64_t n) {
      std::vector<T> cols(static_cast<size_t>(g.patch() * g.pixels()));
      for (int64_t group = 0; group < g.groups; ++group) {
        gemm<T>(true, false, g.patch(), g.pixels(), g.og(), weight + group * g.og() * g.patch(), g.patch(),
                dy + (n * g.o + group * g.og()) * g.pixels(), g.pixels(), T(0), cols.data(), g.pixels());
        col2im(g, cols.data(), group, dx + n * g.c * g.h * g.w);
      }
    });
  });
}

void conv_grad_weight_kernel(KernelContext& ctx) {
  const Tensor &grad = ctx.inputs[0], &x = ctx.inputs[1];
  Tensor& gw = ctx.outputs[0];
  const ConvGeometry g = geometry(x.shape(), gw.shape(), grad.shape(), ctx.attrs);
  FLOW_DISPATCH_FLOATING(grad.dtype(), "conv2d", [&]<typename T>() {
    const T* dy = static_cast<const T*>(grad.data_ptr());
    const T* in = static_cast<const T*>(x.data_ptr());
    T* dw = static_cast<T*>(gw.data_ptr());
    std::memset(dw, 0, static_cast<size_t>(gw.numel()) * sizeof(T));
    // Images accumulate into one weight gradient in a fixed order; BLAS threads within each GEMM.
    std::vector<T> cols(static_cast<size_t>(g.patch() * g.pixels()));
    for (int64_t n = 0; n < g.n; ++n) {
      for (int64_t group = 0; group < g.groups; ++group) {
        im2col(g, in + n * g.c * g.h * g.w, group, cols.data());
        gemm<T>(false, true, g.og(), g.patch(), g.pixels(), dy + (n * g.o + group * g.og()) * g.pixels(), g.pixels(), cols.data(),
                g.pixels(), T(1), dw + group * g.og() * g.patch(), g.patch());
      }
    }
  });
}

struct PoolGeometry {
  int64_t planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw;
};

PoolGeometry pool_geometry(const Shape& x, const Shape& y, const Attrs& attrs) {
  const Pair &k = attrs.get<Pair>("kernel_size"), &s = attrs.get<Pair>("stride"), &p = attrs.get<Pair>("padding");
  return {x[0] * x[1], x[2], x[3], y[2], y[3], k[0], k[1], s[0], s[1], p[0], p[1]};
}

// The valid input range [begin, end) of output position o's window along one axis.
struct WindowRange {
  int64_t begin, end;
};
inline WindowRange window(int64_t o, int64_t stride, int64_t pad, int64_t kernel, int64_t size) {
  const int64_t start = o * stride - pad;
  return {std::max<int64_t>(start, 0), std::min<int64_t>(start + kernel, size)};
}

void max_pool_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const PoolGeometry g = pool_geometry(x.shape(), ctx.outputs[0].shape(), ctx.attrs);
  FLOW_DISPATCH_FLOATING(x.dtype(), "max_pool2d", [&]<typename T>() {
    const T* in = static_cast<const T*>(x.data_ptr());
    T* out = static_cast<T*>(ctx.outputs[0].data_ptr());
    int64_t* indices = static_cast<int64_t*>(ctx.outputs[1].data_ptr());
    parallel_for(0, g.planes, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(g.h * g.w, 1)), [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const T* src = in + plane * g.h * g.w;
        for (int64_t y = 0; y < g.oh; ++y) {
          const WindowRange rows = window(y, g.sh, g.ph, g.kh, g.h);
          for (int64_t x0 = 0; x0 < g.ow; ++x0) {
            const WindowRange cols = window(x0, g.sw, g.pw, g.kw, g.w);
            int64_t best_index = rows.begin * g.w + cols.begin;
            T best = src[best_index];
            for (int64_t iy = rows.begin; iy < rows.end; ++iy) {
              for (int64_t ix = cols.begin; ix < cols.end; ++ix) {
                const T v = src[iy * g.w + ix];
                // Branch-free select (random data would mispredict); NaN wins and stays, as in PyTorch.
                const bool take = (v > best) | ((v != v) & (best == best));
                best = take ? v : best;
                best_index = take ? iy * g.w + ix : best_index;
              }
            }
            const int64_t o = (plane * g.oh + y) * g.ow + x0;
            out[o] = best;
            indices[o] = best_index;
          }
        }
      }
    });
  });
}

void max_pool_grad_kernel(KernelContext& ctx) {
  const Tensor &grad = ctx.inputs[0], &indices = ctx.inputs[1];
  Tensor& gx = ctx.outputs[0];
  const int64_t plane_in = gx.size(2) * gx.size(3), plane_out = grad.size(2) * grad.size(3);
  FLOW_DISPATCH_FLOATING(grad.dtype(), "max_pool2d", [&]<typename T>() {
    const T* dy = static_cast<const T*>(grad.data_ptr());
    const int64_t* idx = static_cast<const int64_t*>(indices.data_ptr());
    T* dx = static_cast<T*>(gx.data_ptr());
    std::memset(dx, 0, static_cast<size_t>(gx.numel()) * sizeof(T));
    parallel_for(0, gx.size(0) * gx.size(1), 1, [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        for (int64_t o = 0; o < plane_out; ++o) dx[plane * plane_in + idx[plane * plane_out + o]] += dy[plane * plane_out + o];
      }
    });
  });
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
    parallel_for(0, g.planes, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(g.h * g.w, 1)), [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const int64_t base = plane * g.h * g.w;
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

FLOW_REGISTER_KERNEL("conv2d", DeviceType::kCPU, {kFloat64}, conv_kernel);
FLOW_REGISTER_KERNEL("conv2d_grad_input", DeviceType::kCPU, {kFloat64}, conv_grad_input_kernel);
FLOW_REGISTER_KERNEL("conv2d_grad_weight", DeviceType::kCPU, {kFloat64}, conv_grad_weight_kernel);
FLOW_REGISTER_KERNEL("max_pool2d", DeviceType::kCPU, floating_dtypes(), max_pool_kernel);
FLOW_REGISTER_KERNEL("max_pool2d_grad", DeviceType::kCPU, floating_dtypes(), max_pool_grad_kernel);
FLOW_REGISTER_KERNEL("avg_pool2d", DeviceType::kCPU, floating_dtypes(), avg_pool_kernel<false>);
FLOW_REGISTER_KERNEL("avg_pool2d_grad", DeviceType::kCPU, floating_dtypes(), avg_pool_kernel<true>);

}  // namespace
}  // namespace flow::cpu
