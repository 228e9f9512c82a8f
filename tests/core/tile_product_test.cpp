// onednn_tile_product: the products the fused attention tiles its work into, on raw row-major
// matrices with leading dimensions, transposes, alpha and beta.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "core/half.h"
#include "core/kernels/cpu/matmul.h"

namespace {

using flow::BFloat16;

struct Case {
  bool trans_a, trans_b;
  int64_t m, n, k;
  float alpha, beta;
};

// A matrix of `rows` x `cols` stored with rows `ld` apart (ld >= cols), padding set to NaN so a
// product that reads it shows.
template <typename T>
std::vector<T> matrix(int64_t rows, int64_t cols, int64_t ld, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<T> data(static_cast<size_t>(rows * ld), T(std::nanf("")));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) data[static_cast<size_t>(r * ld + c)] = T(normal(rng));
  }
  return data;
}

// Runs one case and compares with a float64 product of the same (rounded) operands; false when
// oneDNN has no kernel for it here.
template <typename T>
bool check(flow::DType dtype, const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t a_rows = c.trans_a ? c.k : c.m, a_cols = c.trans_a ? c.m : c.k;
  const int64_t b_rows = c.trans_b ? c.n : c.k, b_cols = c.trans_b ? c.k : c.n;
  const int64_t lda = a_cols + 3, ldb = b_cols + 5, ldc = c.n + 2;
  const auto a = matrix<T>(a_rows, a_cols, lda, rng), b = matrix<T>(b_rows, b_cols, ldb, rng);
  auto out = matrix<float>(c.m, c.n, ldc, rng);
  const auto before = out;
  if (!flow::cpu::onednn_tile_product(dtype, c.trans_a, c.trans_b, c.m, c.n, c.k, c.alpha, a.data(), lda, b.data(), ldb, c.beta, out.data(),
                                      ldc)) {
    return false;
  }
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double want = 0;
      for (int64_t x = 0; x < c.k; ++x) {
        const double av = static_cast<float>(c.trans_a ? a[static_cast<size_t>(x * lda + i)] : a[static_cast<size_t>(i * lda + x)]);
        const double bv = static_cast<float>(c.trans_b ? b[static_cast<size_t>(j * ldb + x)] : b[static_cast<size_t>(x * ldb + j)]);
        want += av * bv;
      }
      want = c.alpha * want + c.beta * before[static_cast<size_t>(i * ldc + j)];
      EXPECT_NEAR(out[static_cast<size_t>(i * ldc + j)], want, 1e-4 * (1 + std::abs(want)))
          << "at (" << i << ", " << j << ") trans " << c.trans_a << c.trans_b << " beta " << c.beta;
    }
    // The padding between output rows is not written.
    for (int64_t j = c.n; j < ldc && i + 1 < c.m; ++j) EXPECT_TRUE(std::isnan(out[static_cast<size_t>(i * ldc + j)]));
  }
  return true;
}

// The shapes of the attention's tiles: full 64 x 64 ones over 64 features and the ragged last ones.
// oneDNN may refuse some (small float32 products: its brgemm is not chosen); those the caller
// computes itself, and at least the full tiles must run here wherever it runs any.
TEST(TileProduct, TransposesScalesAndAccumulatesOverLeadingDimensions) {
  int ran = 0;
  for (const flow::DType dtype : {flow::kFloat32, flow::kBFloat16}) {
    for (const auto& [m, n, k] : {std::array<int64_t, 3>{64, 64, 64}, {64, 37, 64}, {13, 64, 48}}) {
      for (const bool trans_a : {false, true}) {
        for (const bool trans_b : {false, true}) {
          for (const float beta : {0.0f, 1.0f}) {
            const Case c{trans_a, trans_b, m, n, k, 0.125f, beta};
            ran += dtype == flow::kFloat32 ? check<float>(dtype, c, 7) : check<BFloat16>(dtype, c, 7);
          }
        }
      }
    }
  }
  if (ran == 0) GTEST_SKIP() << "oneDNN has no brgemm kernels on this CPU";
  EXPECT_GE(ran, 8);
}

// Each thread keeps a bounded set of products bound to its memory objects: more shapes than it
// keeps, then the first again, and two threads at once, all still compute the right values.
TEST(TileProduct, ManyShapesAndThreadsEachGetTheirOwnValues) {
  const Case first{false, true, 64, 64, 64, 1.0f, 0.0f};
  if (!check<BFloat16>(flow::kBFloat16, first, 1)) GTEST_SKIP() << "oneDNN has no bfloat16 kernel on this CPU";
  for (int64_t k = 1; k <= 70; ++k) check<BFloat16>(flow::kBFloat16, Case{false, false, 64, 32, k, 1.0f, 1.0f}, static_cast<uint32_t>(k));
  EXPECT_TRUE(check<BFloat16>(flow::kBFloat16, first, 2));
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < 2; ++t) {
    threads.emplace_back([t] {
      for (uint32_t round = 0; round < 20; ++round)
        check<BFloat16>(flow::kBFloat16, Case{t == 1, false, 64, 48, 64, 0.5f, 1.0f}, 100 * t + round);
    });
  }
  for (auto& thread : threads) thread.join();
}

}  // namespace
