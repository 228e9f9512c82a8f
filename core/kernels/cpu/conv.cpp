// float64 convolution as im2col + BLAS GEMM per image and group (forward, and both gradients
// via col2im and GEMM). Images are split over the thread pool, each one's GEMM running
// single-threaded so the split does not oversubscribe. float32 weight gradients of convolutions
// on few input channels take the same route (conv_grad_weight_by_gemm, called by conv_dnnl.cpp).
#include <cblas.h>

#include <cstring>

#include "core/kernels/cpu/conv_gemm.h"
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
  sync_openmp_threads();
  if constexpr (std::is_same_v<T, float>) cblas_sgemm(CblasRowMajor, trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
  else cblas_dgemm(CblasRowMajor, trans_a, trans_b, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
}

// Runs fn(image) for every image: images spread over the threads when there are enough of them
// (BLAS calls inside a parallel region run on one thread), else one by one with BLAS threaded.
void for_each_image(int64_t images, const std::function<void(int64_t)>& fn) {
  if (images >= current_num_threads()) {
    parallel_for(0, images, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) fn(i);
    });
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

}  // namespace

void conv_grad_weight_by_gemm(KernelContext& ctx) {
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

namespace {

FLOW_REGISTER_KERNEL("conv2d", DeviceType::kCPU, {kFloat64}, conv_kernel);
FLOW_REGISTER_KERNEL("conv2d_grad_input", DeviceType::kCPU, {kFloat64}, conv_grad_input_kernel);
FLOW_REGISTER_KERNEL("conv2d_grad_weight", DeviceType::kCPU, {kFloat64}, conv_grad_weight_by_gemm);

}  // namespace
}  // namespace flow::cpu
