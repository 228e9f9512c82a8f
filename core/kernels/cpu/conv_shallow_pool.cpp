#include "core/kernels/cpu/conv_shallow_pool.h"

#include <glog/logging.h>
#include <immintrin.h>

#include <algorithm>

#include "core/thread_pool.h"

namespace flow::cpu {
namespace {

constexpr int64_t kLanes = 16;  // float32 lanes of an AVX-512 register

#define FLOW_AVX512 __attribute__((target("avx512f")))

constexpr __mmask16 kAllLanes = 0xffff;

// vmaxps: b where either is NaN. (The zero-masked form over all lanes: GCC 12's _mm512_max_ps
// warns of its own uninitialised pass-through operand.)
FLOW_AVX512 inline __m512 max_ps(__m512 a, __m512 b) { return _mm512_maskz_max_ps(kAllLanes, a, b); }

// The larger of a and b, NaN where either is NaN.
FLOW_AVX512 inline __m512 max_keeping_nan(__m512 a, __m512 b) {
  return _mm512_mask_mov_ps(max_ps(a, b), _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a);
}

// One row of pooled pixels, `Vectors` x 16 output channels each: the four convolution outputs of
// a pixel's window accumulate in registers (4 x Vectors independent sums), then their maximum,
// the bias and the ReLU (max(0, x) keeps NaN, as `x < 0 ? 0 : x` does) go to y.
template <int Vectors>
FLOW_AVX512 void pooled_row(const ShallowConvPoolShape& s, const float* weights, const float* bias, const float* x, int64_t pooled_row_index,
                            int64_t pooled_width, float* y, bool relu) {
  const int64_t plane = s.height * s.width;
  __m512 b[Vectors];
  for (int v = 0; v < Vectors; ++v) b[v] = _mm512_loadu_ps(bias + v * kLanes);
  for (int64_t pw = 0; pw < pooled_width; ++pw) {
    __m512 acc[4][Vectors];
    for (auto& pixel : acc) {
      for (auto& sum : pixel) sum = _mm512_setzero_ps();
    }
    const float* tap_weights = weights;
    for (int64_t ci = 0; ci < s.in_channels; ++ci) {
      const float* window = x + ci * plane + 2 * pooled_row_index * s.width + 2 * pw;
      for (int64_t kh = 0; kh < s.kernel_h; ++kh) {
        for (int64_t kw = 0; kw < s.kernel_w; ++kw, tap_weights += Vectors * kLanes) {
          __m512 w[Vectors];
          for (int v = 0; v < Vectors; ++v) w[v] = _mm512_loadu_ps(tap_weights + v * kLanes);
          const float* at = window + kh * s.width + kw;
          for (int p = 0; p < 4; ++p) {
            const __m512 value = _mm512_set1_ps(at[(p >> 1) * s.width + (p & 1)]);
            for (int v = 0; v < Vectors; ++v) acc[p][v] = _mm512_fmadd_ps(value, w[v], acc[p][v]);
          }
        }
      }
    }
    float* out = y + pw * Vectors * kLanes;
    for (int v = 0; v < Vectors; ++v) {
      __m512 m = _mm512_add_ps(max_keeping_nan(max_keeping_nan(acc[0][v], acc[1][v]), max_keeping_nan(acc[2][v], acc[3][v])), b[v]);
      if (relu) m = max_ps(_mm512_setzero_ps(), m);
      _mm512_storeu_ps(out + v * kLanes, m);
    }
  }
}

}  // namespace

bool ShallowConvPool::supports(const ShallowConvPoolShape& s) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512 && s.batch > 0 && s.in_channels >= 1 && s.in_channels <= 4 && s.out_channels % kLanes == 0 && s.out_channels >= kLanes &&
         s.out_channels <= 4 * kLanes && s.kernel_h >= 1 && s.kernel_w >= 1 && s.in_channels * s.kernel_h * s.kernel_w <= 36 &&
         s.height - s.kernel_h + 1 >= 2 && s.width - s.kernel_w + 1 >= 2;
}

ShallowConvPool::ShallowConvPool(const ShallowConvPoolShape& shape, const float* weight, const float* bias)
    : shape_(shape), bias_(static_cast<size_t>(shape.out_channels), 0.f) {
  CHECK(supports(shape));
  const int64_t taps = shape.in_channels * shape.kernel_h * shape.kernel_w;
  weights_.resize(static_cast<size_t>(taps * shape.out_channels));
  for (int64_t co = 0; co < shape.out_channels; ++co) {
    for (int64_t tap = 0; tap < taps; ++tap) weights_[static_cast<size_t>(tap * shape.out_channels + co)] = weight[co * taps + tap];
    if (bias != nullptr) bias_[static_cast<size_t>(co)] = bias[co];
  }
}

void ShallowConvPool::run(const float* x, float* y, bool relu) const {
  const ShallowConvPoolShape& s = shape_;
  const int64_t ph = pooled_height(), pw = pooled_width(), image = s.in_channels * s.height * s.width;
  const int64_t row_floats = pw * s.out_channels;
  // Chunks of at least ~32K multiply-adds (a few microseconds): a single image stays on one thread.
  const int64_t grain = std::max<int64_t>(1, 32768 / (pw * s.in_channels * s.kernel_h * s.kernel_w * s.out_channels));
  parallel_for(0, s.batch * ph, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* source = x + (r / ph) * image;
      float* row = y + r * row_floats;
      switch (s.out_channels / kLanes) {
        case 1: pooled_row<1>(s, weights_.data(), bias_.data(), source, r % ph, pw, row, relu); break;
        case 2: pooled_row<2>(s, weights_.data(), bias_.data(), source, r % ph, pw, row, relu); break;
        case 3: pooled_row<3>(s, weights_.data(), bias_.data(), source, r % ph, pw, row, relu); break;
        default: pooled_row<4>(s, weights_.data(), bias_.data(), source, r % ph, pw, row, relu); break;
      }
    }
  });
}

}  // namespace flow::cpu
