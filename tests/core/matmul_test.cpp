#include <gtest/gtest.h>

#include <array>

#include "common/reference.h"
#include "common/test_util.h"

using flow::Shape;
using flow::Tensor;
using flow::testing::expect_close;
using flow::testing::values;

namespace {
// Naive double matmul of the last two dims with broadcast batch dims (both operands >= 2-d).
Tensor reference_matmul(const Tensor& a, const Tensor& b) {
  const int64_t n = a.size(-2), k = a.size(-1), m = b.size(-1);
  const Shape batch_a(a.shape().begin(), a.shape().end() - 2), batch_b(b.shape().begin(), b.shape().end() - 2);
  Shape out_batch = flow::broadcast_shapes(batch_a, batch_b, "ref");
  const auto va = values(a), vb = values(b);
  std::vector<double> out;
  for (int64_t i = 0; i < out_batch.numel(); ++i) {
    const int64_t oa = flow::testing::broadcast_offset(batch_a, out_batch, i) * n * k;
    const int64_t ob = flow::testing::broadcast_offset(batch_b, out_batch, i) * k * m;
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < m; ++c) {
        double s = 0;
        for (int64_t j = 0; j < k; ++j) s += va[oa + r * k + j] * vb[ob + j * m + c];
        out.push_back(s);
      }
    }
  }
  out_batch.push_back(n);
  out_batch.push_back(m);
  return flow::tensor(out, out_batch);
}
}  // namespace

TEST(Matmul, MatchesReferenceIncludingBatchBroadcast) {
  flow::manual_seed(7);
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 4}, {4, 5}}, {{1, 7}, {7, 1}}, {{2, 3, 4}, {2, 4, 5}}, {{2, 3, 4}, {4, 5}}, {{3, 4}, {2, 2, 4, 6}},
      {{2, 1, 3, 4}, {5, 4, 2}}, {{64, 784}, {784, 33}}, {{3, 0}, {0, 4}}, {{0, 3}, {3, 2}}};
  for (flow::DType dtype : {flow::kFloat32, flow::kFloat64}) {
    for (const auto& [sa, sb] : cases) {
      SCOPED_TRACE(sa.str() + " @ " + sb.str());
      Tensor a = flow::randn(sa, dtype), b = flow::randn(sb, dtype);
      expect_close(flow::matmul(a, b), reference_matmul(a, b), dtype == flow::kFloat32 ? 1e-4 : 1e-12, 1e-4);
    }
  }
}

TEST(Matmul, VectorsAndTransposedOperands) {
  Tensor v = flow::tensor<double>({1, 2, 3});
  Tensor m = flow::arange(6, flow::kFloat64).reshape({3, 2});
  EXPECT_EQ(flow::matmul(v, v).dim(), 0);
  EXPECT_DOUBLE_EQ(flow::matmul(v, v).item<double>(), 14);
  EXPECT_EQ(flow::matmul(v, m).tolist<double>(), (std::vector<double>{16, 22}));
  EXPECT_EQ(flow::matmul(m.t(), v).tolist<double>(), (std::vector<double>{16, 22}));
  Tensor a = flow::randn({5, 4}), b = flow::randn({3, 5});
  expect_close(flow::matmul(a.t(), b.t()), reference_matmul(a.t().contiguous(), b.t().contiguous()), 1e-5, 1e-5);
  Tensor strided = flow::randn({6, 8}).slice(1, 0, 8, 2);  // neither rows nor columns contiguous
  expect_close(flow::matmul(strided, b.t().slice(0, 0, 4)), reference_matmul(strided, b.t().slice(0, 0, 4)), 1e-5, 1e-5);
  Tensor expanded = flow::randn({1, 4, 3}).expand({5, 4, 3});  // stride-0 batch dim
  Tensor lhs = flow::randn({5, 2, 4});
  expect_close(flow::bmm(lhs, expanded), reference_matmul(lhs, expanded.contiguous()), 1e-5, 1e-5);
}

namespace {
// (m x k) @ (k x n) against the reference with either operand stored transposed.
void expect_matmul_in_every_layout(int64_t m, int64_t k, int64_t n, flow::DType dtype, double tol) {
  for (bool a_transposed : {false, true}) {
    for (bool b_transposed : {false, true}) {
      SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n) + (a_transposed ? " a^T" : "") +
                   (b_transposed ? " b^T" : ""));
      Tensor a = a_transposed ? flow::randn({k, m}, dtype).t() : flow::randn({m, k}, dtype);
      Tensor b = b_transposed ? flow::randn({n, k}, dtype).t() : flow::randn({k, n}, dtype);
      expect_close(flow::matmul(a, b), reference_matmul(a.contiguous(), b.contiguous()), tol, 1e-4);
    }
  }
}
}  // namespace

// One row or one column goes through GEMV rather than GEMM: every operand layout.
TEST(Matmul, SingleRowOrColumnInEveryLayout) {
  flow::manual_seed(9);
  for (flow::DType dtype : {flow::kFloat32, flow::kFloat64}) {
    const double tol = dtype == flow::kFloat32 ? 1e-4 : 1e-12;
    for (const auto& [m, k, n] : std::vector<std::array<int64_t, 3>>{{1, 7, 5}, {6, 7, 1}, {1, 7, 1}, {1, 1, 4}}) {
      expect_matmul_in_every_layout(m, k, n, dtype, tol);
    }
    Tensor x = flow::randn({1, 6}, dtype), w = flow::randn({4, 6}, dtype), bias = flow::randn({4}, dtype);
    expect_close(flow::linear(x, w, bias), reference_matmul(x, w.t().contiguous()) + bias, tol, 1e-4);
    expect_close(flow::linear(x, w), reference_matmul(x, w.t().contiguous()), tol, 1e-4);
  }
}

// A few rows at several threads are split by output columns over the threads (when each thread
// gets enough work: at least 2M multiply-adds): every operand layout, column counts that do not
// divide evenly, linear's bias accumulated by each chunk; products too small to split run whole.
TEST(Matmul, FewRowsSplitByColumnsInEveryLayout) {
  flow::manual_seed(10);
  const int previous = flow::get_num_threads();
  flow::set_num_threads(3);
  for (flow::DType dtype : {flow::kFloat32, flow::kFloat64}) {
    const double tol = dtype == flow::kFloat32 ? 1e-3 : 1e-11;
    for (const auto& [m, k, n] :
         std::vector<std::array<int64_t, 3>>{{8, 1024, 750}, {32, 256, 800}, {2, 3000, 1100}, {8, 33, 97}}) {
      expect_matmul_in_every_layout(m, k, n, dtype, tol);
      Tensor x = flow::randn({m, k}, dtype), w = flow::randn({n, k}, dtype), bias = flow::randn({n}, dtype);
      expect_close(flow::linear(x, w, bias), reference_matmul(x, w.t().contiguous()) + bias, tol, 1e-4);
    }
  }
  flow::set_num_threads(previous);
}

// One row or column at several threads is split into GEMVs over slices of the matrix (each thread
// reading at least 256K of its elements): every layout, uneven slices, linear's bias.
TEST(Matmul, SingleRowOrColumnSplitOverThreads) {
  flow::manual_seed(11);
  const int previous = flow::get_num_threads();
  flow::set_num_threads(3);
  for (flow::DType dtype : {flow::kFloat32, flow::kFloat64}) {
    const double tol = dtype == flow::kFloat32 ? 1e-3 : 1e-11;
    for (const auto& [m, k, n] : std::vector<std::array<int64_t, 3>>{{1, 1024, 800}, {800, 1024, 1}, {1, 300, 2700}}) {
      expect_matmul_in_every_layout(m, k, n, dtype, tol);
    }
    Tensor x = flow::randn({1, 1024}, dtype), w = flow::randn({700, 1024}, dtype), bias = flow::randn({700}, dtype);
    expect_close(flow::linear(x, w, bias), reference_matmul(x, w.t().contiguous()) + bias, tol, 1e-4);
  }
  flow::set_num_threads(previous);
}

TEST(Matmul, LinearWithAndWithoutBias) {
  flow::manual_seed(8);
  Tensor x = flow::randn({2, 3, 6}), w = flow::randn({4, 6}), b = flow::randn({4});
  Tensor expected = reference_matmul(x, w.t().contiguous()) + b;
  expect_close(flow::linear(x, w, b), expected, 1e-5, 1e-5);
  expect_close(flow::linear(x, w), reference_matmul(x, w.t().contiguous()), 1e-5, 1e-5);
  expect_close(flow::linear(x.transpose(0, 1), w, b), reference_matmul(x.transpose(0, 1).contiguous(), w.t().contiguous()) + b,
               1e-5, 1e-5);
  EXPECT_EQ(flow::linear(flow::zeros({0, 6}), w, b).shape(), (Shape{0, 4}));
}

TEST(Matmul, Errors) {
  EXPECT_THROW_MSG(flow::matmul(flow::zeros({2, 3}), flow::zeros({4, 5})), "[matmul] size mismatch: (2,3) @ (4,5)");
  EXPECT_THROW_MSG(flow::matmul(flow::arange(6).reshape({2, 3}), flow::arange(6).reshape({3, 2})),
                   "[matmul] expected floating point inputs, got int64 and int64");
  EXPECT_THROW_MSG(flow::matmul(flow::zeros({2, 2}), flow::zeros({2, 2}, flow::kFloat64)),
                   "[matmul] expected both inputs to have the same dtype, got float32 and float64");
  EXPECT_THROW_MSG(flow::matmul(flow::zeros({}), flow::zeros({2})), "[matmul] both arguments need at least 1 dimension");
  EXPECT_THROW_MSG(flow::matmul(flow::zeros({2, 2, 3}), flow::zeros({3, 3, 2})), "[matmul] shapes (2,) and (3,) cannot be broadcast");
  EXPECT_THROW_MSG(flow::mm(flow::zeros({2}), flow::zeros({2, 2})), "[mm] expected 2-d tensors");
  EXPECT_THROW_MSG(flow::bmm(flow::zeros({2, 2, 2}), flow::zeros({3, 2, 2})), "[bmm] batch sizes differ");
  EXPECT_THROW_MSG(flow::linear(flow::zeros({2, 5}), flow::zeros({4, 6})), "[linear] size mismatch: input (2,5) has 5 features");
  EXPECT_THROW_MSG(flow::linear(flow::zeros({2, 6}), flow::zeros({4, 6}), flow::zeros({3})), "[linear] bias must have shape (4,)");
}

// A bfloat16 weight gradient's shape, g^T @ x with g (1024, 32768): oneDNN computes it as
// (x^T @ g)^T where that is faster (core/kernels/cpu/matmul_dnnl.cpp); either way the values are
// the float32 product's, rounded.
TEST(Matmul, LargeTransposedBFloat16OperandMatchesFloat32) {
  flow::manual_seed(12);
  const Tensor g = flow::randn({1024, 32768}).to(flow::kBFloat16), x = flow::randn({1024, 64}).to(flow::kBFloat16);
  const Tensor product = flow::matmul(g.t(), x);
  ASSERT_EQ(product.shape(), (Shape{32768, 64}));
  ASSERT_EQ(product.dtype(), flow::kBFloat16);
  const Tensor want = flow::matmul(g.t().to(flow::kFloat32), x.to(flow::kFloat32));
  expect_close(product.to(flow::kFloat32), want, 1e-2, 0.25);
}
