// CPU GEMM through OpenBLAS, or oneDNN where it has faster kernels (matmul_dnnl.cpp). Operands of
// any strides: a matrix whose rows or columns are contiguous goes to BLAS as is (transposed when
// column-major), others are copied first.
#include <cblas.h>

#include <optional>

#include "core/kernels/cpu/matmul.h"
#include "core/kernels/cpu/reduce_loop.h"
#include "core/op.h"
#include "core/ops/copy.h"
#include "core/thread_pool.h"

namespace flow::cpu {
namespace {

struct MatrixView {
  Tensor holder;  // keeps a contiguous copy alive when one was needed
  CBLAS_TRANSPOSE trans = CblasNoTrans;
  int64_t ld = 0;
};

// How to hand the last two dims of t (rows x cols) to BLAS.
MatrixView blas_view(const Tensor& t) {
  const int64_t rows = t.size(-2), cols = t.size(-1);
  const int64_t rs = t.stride(-2), cs = t.stride(-1);
  if ((cs == 1 || cols == 1) && rs >= std::max<int64_t>(cols, 1)) return {t, CblasNoTrans, rs};
  if ((rs == 1 || rows == 1) && cs >= std::max<int64_t>(rows, 1)) return {t, CblasTrans, cs};
  Tensor copy = detail::contiguous_copy(t);
  return {copy, CblasNoTrans, std::max<int64_t>(cols, 1)};
}

template <typename T>
void gemv(CBLAS_TRANSPOSE trans, int64_t rows, int64_t cols, const T* a, int64_t lda, const T* x, int64_t incx,
          T beta, T* y, int64_t incy) {
  // BLAS lets beta = 0 read y anyway (0 * NaN); planned buffers may hold anything.
  if (beta == T(0)) {
    const int64_t length = trans == CblasNoTrans ? rows : cols;
    for (int64_t i = 0; i < length; ++i) y[i * incy] = T(0);
  }
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemv(CblasRowMajor, trans, rows, cols, 1.0f, a, lda, x, incx, beta, y, incy);
  } else {
    cblas_dgemv(CblasRowMajor, trans, rows, cols, 1.0, a, lda, x, incx, beta, y, incy);
  }
}

CBLAS_TRANSPOSE flipped(CBLAS_TRANSPOSE trans) { return trans == CblasNoTrans ? CblasTrans : CblasNoTrans; }

template <typename T>
void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
               int64_t ldb, T beta, T* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
  }
}

// Products of a few rows are split by output columns, one single-threaded GEMM per thread (inside
// a parallel region OpenBLAS's OpenMP build runs on the calling thread): OpenBLAS's own threading
// of them is slower than one thread, measured on 2 cores for 8x784 @ 784x512: 1 thread 188 us,
// OpenBLAS at 2 threads 202 us, split by columns 99 us (at 64 rows the two are level).
constexpr int64_t kFewRows = 32;
constexpr int64_t kMinColumnsPerThread = 32;
// Below this many matrix elements per thread a GEMV (memory-bound: it reads each element once) is
// not worth a second thread, and far less when other processes hold the cores: on a loaded 2-core
// machine OpenBLAS's threaded GEMV took 56 us at 2 threads for 1x256 @ 256x256 against 2.8 us on
// one (a decode step of a small language model runs dozens of them). GEMMs take
// kMinProductMacsPerThread (matmul.h), as oneDNN's products do.
constexpr int64_t kMinGemvElementsPerThread = int64_t{1} << 18;

// Runs body(lo, hi) over [0, n) in chunks of at least `grain` on flow's threads, each chunk's
// BLAS calls on its own thread; one chunk runs with OpenMP capped at one thread, so that OpenBLAS
// does not thread it by itself.
template <typename Body>
void split_product(int64_t n, int64_t grain, const Body& body) {
  if (n / std::max<int64_t>(grain, 1) < 2 || current_num_threads() < 2) {
    const ThreadCapScope one_thread(1);
    body(0, n);
  } else {
    parallel_for(0, n, grain, body);
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / std::max<int64_t>(b, 1); }

// c = op(a) @ op(b) + beta * c, row-major. A single row or column goes to GEMV: OpenBLAS's GEMM
// packs the whole other operand first, which for one row (batch-1 inference) costs more than
// the product itself.
template <typename T>
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  sync_openmp_threads();
  if (m == 1) {
    // c^T = op(b)^T @ op(a)^T over slices of op(b)'s columns: column j of op(b) starts at element
    // j of b, or row j (j * ldb) when b is transposed. The row of op(a) has stride 1, or lda.
    const int64_t column_stride = tb == CblasNoTrans ? 1 : ldb;
    split_product(n, ceil_div(kMinGemvElementsPerThread, k), [&](int64_t lo, int64_t hi) {
      const int64_t b_rows = tb == CblasNoTrans ? k : hi - lo, b_cols = tb == CblasNoTrans ? hi - lo : k;
      gemv<T>(flipped(tb), b_rows, b_cols, b + lo * column_stride, ldb, a, ta == CblasNoTrans ? 1 : lda, beta, c + lo, 1);
    });
  } else if (n == 1) {
    // Row i of op(a) starts at row i of a (i * lda), or at element i when a is transposed.
    const int64_t row_stride = ta == CblasNoTrans ? lda : 1;
    split_product(m, ceil_div(kMinGemvElementsPerThread, k), [&](int64_t lo, int64_t hi) {
      const int64_t a_rows = ta == CblasNoTrans ? hi - lo : k, a_cols = ta == CblasNoTrans ? k : hi - lo;
      gemv<T>(ta, a_rows, a_cols, a + lo * row_stride, lda, b, tb == CblasNoTrans ? ldb : 1, beta, c + lo * ldc, ldc);
    });
  } else if (m <= kFewRows && n >= 2 * kMinColumnsPerThread) {
    const int64_t column_stride = tb == CblasNoTrans ? 1 : ldb;
    const int64_t grain = std::max(kMinColumnsPerThread, ceil_div(kMinProductMacsPerThread, m * k));
    split_product(n, grain, [&](int64_t lo, int64_t hi) {
      blas_gemm<T>(ta, tb, m, hi - lo, k, a, lda, b + lo * column_stride, ldb, beta, c + lo, ldc);
    });
  } else {
    // OpenBLAS threads the rest itself, from its own (lower) size on: capped below two threads' worth.
    std::optional<ThreadCapScope> one_thread;
    if (m * n * k < 2 * kMinProductMacsPerThread) one_thread.emplace(1);
    blas_gemm<T>(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
  }
}

}  // namespace

std::vector<int64_t> batch_offsets(const Tensor& operand, const Shape& out_batch) {
  const int64_t lead = static_cast<int64_t>(out_batch.size()) - (operand.dim() - 2);
  std::vector<int64_t> strides(out_batch.size(), 0);
  for (int64_t d = 0; d < operand.dim() - 2; ++d) {
    if (operand.size(d) != 1) strides[static_cast<size_t>(d + lead)] = operand.stride(d);
  }
  const int64_t count = out_batch.numel();
  std::vector<int64_t> offsets(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) offsets[static_cast<size_t>(i)] = offset_of(i, out_batch.vec(), strides);
  return offsets;
}

void matmul_kernel(KernelContext& ctx) {
  const Tensor &a = ctx.inputs[0], &b = ctx.inputs[1];
  Tensor& out = ctx.outputs[0];
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  const Shape out_batch(out.shape().begin(), out.shape().end() - 2);
  if (out.numel() == 0 || onednn_matmul(a, b, out)) return;
  FLOW_DISPATCH_FLOATING(a.dtype(), "matmul", [&]<typename T>() {
    T* c = static_cast<T*>(out.data_ptr());
    if (k == 0) {
      std::fill(c, c + out.numel(), T(0));
      return;
    }
    const MatrixView va = blas_view(a), vb = blas_view(b);
    const auto offsets_a = batch_offsets(va.holder, out_batch), offsets_b = batch_offsets(vb.holder, out_batch);
    const T* pa = static_cast<const T*>(va.holder.data_ptr());
    const T* pb = static_cast<const T*>(vb.holder.data_ptr());
    for (size_t i = 0; i < offsets_a.size(); ++i) {
      gemm<T>(va.trans, vb.trans, m, n, k, pa + offsets_a[i], va.ld, pb + offsets_b[i], vb.ld, T(0),
              c + static_cast<int64_t>(i) * m * n, n);
    }
  });
}

// out = x @ w^T + bias: bias rows are written first and GEMM accumulates onto them (beta = 1).
void linear_kernel(KernelContext& ctx) {
  const Tensor &x = ctx.inputs[0], &w = ctx.inputs[1];
  Tensor& out = ctx.outputs[0];
  const int64_t in_features = w.size(1), out_features = w.size(0);
  const int64_t rows = out_features == 0 ? 0 : out.numel() / out_features;
  if (onednn_linear(x, w, ctx.inputs.size() == 3 ? ctx.inputs[2] : Tensor(), out)) return;
  FLOW_DISPATCH_FLOATING(x.dtype(), "linear", [&]<typename T>() {
    T* c = static_cast<T*>(out.data_ptr());
    const bool has_bias = ctx.inputs.size() == 3;
    if (has_bias) {
      const T* bias = static_cast<const T*>(ctx.inputs[2].data_ptr());
      for (int64_t r = 0; r < rows; ++r) std::copy(bias, bias + out_features, c + r * out_features);
    }
    if (rows == 0 || out_features == 0) return;
    if (in_features == 0) {
      if (!has_bias) std::fill(c, c + rows * out_features, T(0));
      return;
    }
    gemm<T>(CblasNoTrans, CblasTrans, rows, out_features, in_features, static_cast<const T*>(x.data_ptr()), in_features,
            static_cast<const T*>(w.data_ptr()), in_features, has_bias ? T(1) : T(0), c, out_features);
  });
}

namespace {

FLOW_REGISTER_KERNEL("matmul", DeviceType::kCPU, floating_dtypes(), matmul_kernel);
FLOW_REGISTER_KERNEL("linear", DeviceType::kCPU, floating_dtypes(), linear_kernel);

}  // namespace
}  // namespace flow::cpu
