#include "core/kernels/cpu/linear_packed.h"

#include <glog/logging.h>

#include <algorithm>
#include <array>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define FLOW_PACKED_LINEAR 1
#endif

#include "core/thread_pool.h"

namespace flow::cpu {

#if defined(FLOW_PACKED_LINEAR)
namespace {

constexpr int64_t kPanel = 16;    // output features per panel: two AVX2 registers
constexpr int64_t kSliceK = 256;  // a panel's slice of K: at most 256 x 16 floats, 16 KiB
constexpr int kMaxRows = 6;       // rows per tile: 12 accumulators, 2 weights, 1 broadcast

struct LinearTile {
  const float* x;      // the tile's first row at the slice's first k
  const float* panel;  // the panel at the slice's first k
  int64_t x_stride, k_count;
  float* y;  // the tile's first row at the panel's first feature
  int64_t y_stride;
  __m256i mask[2];    // the panel's features that exist (all but in a last, partial panel)
  bool partial;       // whether mask is not all ones
  const float* bias;  // added when not null
  bool load_y, relu;
};

template <int Rows>
void run_tile(const LinearTile& t) {
  // GCC keeps the accumulators in registers only when every loop over them is unrolled.
  __m256 acc[2][Rows];
  const float* x[Rows];
#pragma GCC unroll 6
  for (int r = 0; r < Rows; ++r) x[r] = t.x + r * t.x_stride;
#pragma GCC unroll 2
  for (int b = 0; b < 2; ++b) {
    const __m256 bias = t.bias ? _mm256_loadu_ps(t.bias + b * 8) : _mm256_setzero_ps();
#pragma GCC unroll 6
    for (int r = 0; r < Rows; ++r) {
      float* y = t.y + r * t.y_stride + b * 8;
      const __m256 old = !t.load_y ? _mm256_setzero_ps() : t.partial ? _mm256_maskload_ps(y, t.mask[b]) : _mm256_loadu_ps(y);
      acc[b][r] = _mm256_add_ps(old, bias);
    }
  }
  const float* w = t.panel;
  for (int64_t k = 0; k < t.k_count; ++k, w += kPanel) {
    const __m256 w0 = _mm256_loadu_ps(w), w1 = _mm256_loadu_ps(w + 8);
#pragma GCC unroll 6
    for (int r = 0; r < Rows; ++r) {
      const __m256 xv = _mm256_broadcast_ss(x[r] + k);
      acc[0][r] = _mm256_fmadd_ps(xv, w0, acc[0][r]);
      acc[1][r] = _mm256_fmadd_ps(xv, w1, acc[1][r]);
    }
  }
  const __m256 zero = _mm256_setzero_ps();
#pragma GCC unroll 2
  for (int b = 0; b < 2; ++b) {
#pragma GCC unroll 6
    for (int r = 0; r < Rows; ++r) {
      // max(0, x) returns x when x is NaN (the second operand), as flow's relu keeps NaN.
      const __m256 v = t.relu ? _mm256_max_ps(zero, acc[b][r]) : acc[b][r];
      float* y = t.y + r * t.y_stride + b * 8;
      if (t.partial) {
        _mm256_maskstore_ps(y, t.mask[b], v);
      } else {
        _mm256_storeu_ps(y, v);
      }
    }
  }
}

using TileFn = void (*)(const LinearTile&);
constexpr std::array<TileFn, kMaxRows> kTiles{&run_tile<1>, &run_tile<2>, &run_tile<3>, &run_tile<4>, &run_tile<5>, &run_tile<6>};

}  // namespace

bool PackedLinear::available() { return true; }

PackedLinear::PackedLinear(int64_t in_features, int64_t out_features, const float* weight, const float* bias)
    : in_features_(in_features), out_features_(out_features), panels_((out_features + kPanel - 1) / kPanel) {
  CHECK(in_features > 0 && out_features > 0) << "PackedLinear: empty weight";
  packed_.assign(static_cast<size_t>(panels_ * in_features * kPanel), 0.f);
  for (int64_t p = 0; p < panels_; ++p) {
    for (int64_t k = 0; k < in_features; ++k) {
      for (int64_t j = 0; j < kPanel && p * kPanel + j < out_features; ++j) {
        packed_[static_cast<size_t>((p * in_features + k) * kPanel + j)] = weight[(p * kPanel + j) * in_features + k];
      }
    }
  }
  bias_.assign(static_cast<size_t>(panels_ * kPanel), 0.f);
  if (bias) std::copy_n(bias, out_features, bias_.begin());
}

void PackedLinear::run(const float* x, int64_t rows, int64_t x_stride, float* y, bool relu) const {
  // A column's rows in tiles as even as they come (8 rows: 4 + 4, not 6 + 2): a tile of few rows
  // has too few accumulators to cover the FMA latency.
  const int64_t tiles = (rows + kMaxRows - 1) / kMaxRows, short_tile = rows / tiles, long_tiles = rows % tiles;
  // K in even slices (784: 4 x 196, not 3 x 256 + 16): each slice reloads and stores the tile.
  const int64_t slices = (in_features_ + kSliceK - 1) / kSliceK, slice_k = (in_features_ + slices - 1) / slices;
  const auto body = [&](int64_t first_panel, int64_t end_panel) {
    for (int64_t p = first_panel; p < end_panel; ++p) {
      LinearTile t{};
      t.x_stride = x_stride;
      t.y_stride = out_features_;
      const int64_t valid = std::min(kPanel, out_features_ - p * kPanel);
      t.partial = valid < kPanel;
      for (int b = 0; b < 2; ++b) {
        const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        t.mask[b] = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(valid - b * 8)), lanes);
      }
      for (int64_t k0 = 0; k0 < in_features_; k0 += slice_k) {
        const bool first_slice = k0 == 0;
        t.k_count = std::min(slice_k, in_features_ - k0);
        t.panel = packed_.data() + (p * in_features_ + k0) * kPanel;
        t.bias = first_slice ? bias_.data() + p * kPanel : nullptr;
        t.load_y = !first_slice;
        t.relu = relu && k0 + slice_k >= in_features_;
        for (int64_t tile = 0, row = 0; tile < tiles; ++tile) {
          const int64_t count = short_tile + (tile < long_tiles ? 1 : 0);
          t.x = x + row * x_stride + k0;
          t.y = y + row * out_features_ + p * kPanel;
          kTiles[static_cast<size_t>(count - 1)](t);
          row += count;
        }
      }
    }
  };
  parallel_for(0, panels_, 1, body);
}

#else

bool PackedLinear::available() { return false; }
PackedLinear::PackedLinear(int64_t in_features, int64_t out_features, const float*, const float*)
    : in_features_(in_features), out_features_(out_features), panels_(0) {
  LOG(FATAL) << "PackedLinear: built without AVX2";
}
void PackedLinear::run(const float*, int64_t, int64_t, float*, bool) const {}

#endif

}  // namespace flow::cpu
