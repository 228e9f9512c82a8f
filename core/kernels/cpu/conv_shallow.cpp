#include "core/kernels/cpu/conv_shallow.h"

#include <glog/logging.h>

#include <algorithm>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define FLOW_SHALLOW_CONV 1
#endif

#include "core/thread_pool.h"

namespace flow::cpu {

#if defined(FLOW_SHALLOW_CONV)
namespace {

constexpr int64_t kLanes = 8;
constexpr int64_t kMaxInChannels = 4;
constexpr int64_t kMaxTaps = 36;     // weights per output channel
// Register tiles (8 accumulators of the 16 AVX2 registers, or 12): forward, 4 output channels x 2
// row vectors per pass over the taps; weight gradient, 2 output channels x 6 taps per pass over
// the output gradient.
constexpr int64_t kTileChannels = 4;
constexpr int kTileVectors = 2;
constexpr int kGradChannels = 2;
constexpr int kTapBlock = 6;
constexpr int64_t kMinChunkMacs = 1 << 16;  // multiply-adds below which a thread is not worth waking

int64_t row_vectors(const ShallowConvShape& s) { return (s.out_width + kLanes - 1) / kLanes; }
int64_t taps(const ShallowConvShape& s) { return s.in_channels * s.kernel_h * s.kernel_w; }

// The first n lanes of v into dst (n in 1..8); bfloat16 rounds to nearest even, NaN to the quiet
// NaN, as BFloat16(float) does.
void store_lanes(float* dst, __m256 v, int64_t n) {
  if (n == kLanes) return _mm256_storeu_ps(dst, v);
  const __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  _mm256_maskstore_ps(dst, keep, v);
}

void store_lanes(BFloat16* dst, __m256 v, int64_t n) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i lowest_kept = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  __m256i rounded = _mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lowest_kept));
  rounded = _mm256_blendv_epi8(rounded, _mm256_set1_epi32(0x7fc00000), _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
  const __m256i high = _mm256_srli_epi32(rounded, 16);
  const __m128i packed = _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(high, high), _MM_SHUFFLE(3, 1, 2, 0)));
  if (n == kLanes) return _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), packed);
  // Whole pairs as 32-bit lanes, an odd last value on its own.
  _mm_maskstore_epi32(reinterpret_cast<int*>(dst), _mm_cmpgt_epi32(_mm_set1_epi32(static_cast<int>(n / 2)), _mm_setr_epi32(0, 1, 2, 3)), packed);
  if (n % 2 != 0) {
    alignas(16) uint16_t lanes[kLanes];
    _mm_store_si128(reinterpret_cast<__m128i*>(lanes), packed);
    dst[n - 1].bits = lanes[n - 1];
  }
}

// n values (1..8) from src, the other lanes zero.
__m256 load_lanes(const float* src, int64_t n) {
  if (n == kLanes) return _mm256_loadu_ps(src);
  const __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  return _mm256_maskload_ps(src, keep);
}

__m256 load_lanes(const BFloat16* src, int64_t n) {
  __m128i narrow;
  if (n == kLanes) {
    narrow = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  } else {  // whole pairs as 32-bit lanes, an odd last value on its own
    const __m128i pair = _mm_setr_epi32(0, 1, 2, 3), pairs = _mm_set1_epi32(static_cast<int>(n / 2));
    narrow = _mm_maskload_epi32(reinterpret_cast<const int*>(src), _mm_cmpgt_epi32(pairs, pair));
    if (n % 2 != 0) narrow = _mm_blendv_epi8(narrow, _mm_set1_epi32(src[n - 1].bits), _mm_cmpeq_epi32(pairs, pair));
  }
  const __m256i wide = _mm256_cvtepu16_epi32(narrow);
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));  // exact: a bfloat16 is a float32's high half
}

// One image's input planes as float32 with zero padding around them: rows of `pitch` floats, wide
// enough for the last row vector's window (up to 7 columns past the last output plus the kernel's
// width), so every vector of every tap loads whole. Each tap's offset into it is fixed.
class PaddedImage {
 public:
  explicit PaddedImage(const ShallowConvShape& s)
      : shape_(s), pitch_(row_vectors(s) * kLanes + s.kernel_w - 1), plane_(pitch_ * (s.height + 2 * s.pad_h)) {
    data_.assign(static_cast<size_t>(plane_ * s.in_channels), 0.0f);  // the padding is never written again
    for (int64_t c = 0; c < s.in_channels; ++c) {
      for (int64_t ky = 0; ky < s.kernel_h; ++ky) {
        for (int64_t kx = 0; kx < s.kernel_w; ++kx) offsets_.push_back(c * plane_ + ky * pitch_ + kx);
      }
    }
  }

  template <typename T>
  void fill(const T* image) {
    const ShallowConvShape& s = shape_;
    for (int64_t c = 0; c < s.in_channels; ++c) {
      for (int64_t y = 0; y < s.height; ++y) {
        const T* src = image + (c * s.height + y) * s.width;
        float* dst = data_.data() + c * plane_ + (y + s.pad_h) * pitch_ + s.pad_w;
        for (int64_t x = 0; x < s.width; ++x) dst[x] = static_cast<float>(src[x]);
      }
    }
  }

  const float* row(int64_t output_row) const { return data_.data() + output_row * pitch_; }
  const int64_t* offsets() const { return offsets_.data(); }

 private:
  ShallowConvShape shape_;
  int64_t pitch_, plane_;
  std::vector<float> data_;
  std::vector<int64_t> offsets_;
};

// Output vectors [first, first + Vectors) of one row of Channels output channels: every tap's
// input vectors are loaded once for all the channels, and each channel's weight once for all the
// vectors. weights: [tap][Channels] for this block of channels.
template <int Channels, int Vectors, typename T>
void forward_tile(const float* row, const int64_t* offsets, int64_t tap_count, const float* weights, const float* bias, int64_t first,
                  int64_t out_width, T* out_row, int64_t out_plane) {
  __m256 acc[Channels][Vectors];
#pragma GCC unroll 4
  for (int c = 0; c < Channels; ++c) {
#pragma GCC unroll 2
    for (int v = 0; v < Vectors; ++v) acc[c][v] = _mm256_set1_ps(bias[c]);
  }
  const float* base = row + first * kLanes;
  for (int64_t k = 0; k < tap_count; ++k, weights += Channels) {
    __m256 in[Vectors];
#pragma GCC unroll 2
    for (int v = 0; v < Vectors; ++v) in[v] = _mm256_loadu_ps(base + offsets[k] + v * kLanes);
#pragma GCC unroll 4
    for (int c = 0; c < Channels; ++c) {
      const __m256 w = _mm256_broadcast_ss(weights + c);
#pragma GCC unroll 2
      for (int v = 0; v < Vectors; ++v) acc[c][v] = _mm256_fmadd_ps(w, in[v], acc[c][v]);
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < Channels; ++c) {
#pragma GCC unroll 2
    for (int v = 0; v < Vectors; ++v) {
      const int64_t column = (first + v) * kLanes;
      store_lanes(out_row + c * out_plane + column, acc[c][v], std::min(kLanes, out_width - column));
    }
  }
}

// Output channels [first, first + Channels) of one image; weights and bias at the block's start.
template <int Channels, typename T>
void forward_channels(const ShallowConvShape& s, const PaddedImage& image, const float* weights, const float* bias, T* out) {
  const int64_t vectors = row_vectors(s), tap_count = taps(s), plane = s.out_height * s.out_width;
  for (int64_t oy = 0; oy < s.out_height; ++oy) {
    const float* row = image.row(oy);
    T* out_row = out + oy * s.out_width;
    int64_t first = 0;
    for (; first + kTileVectors <= vectors; first += kTileVectors) {
      forward_tile<Channels, kTileVectors>(row, image.offsets(), tap_count, weights, bias, first, s.out_width, out_row, plane);
    }
    if (first < vectors) forward_tile<Channels, 1>(row, image.offsets(), tap_count, weights, bias, first, s.out_width, out_row, plane);
  }
}

// Taps [first, first + Taps) of Channels output channels' weight gradients from one image: the sums
// of each channel's output gradient times the input under each tap, one accumulator per pair.
template <int Channels, int Taps, typename T>
void grad_weight_tile(const ShallowConvShape& s, const PaddedImage& image, const T* grad, int64_t first, float* sums) {
  const int64_t plane = s.out_height * s.out_width, tap_count = taps(s);
  __m256 acc[Channels][Taps];
#pragma GCC unroll 2
  for (int c = 0; c < Channels; ++c) {
#pragma GCC unroll 6
    for (int t = 0; t < Taps; ++t) acc[c][t] = _mm256_setzero_ps();
  }
  const int64_t* offsets = image.offsets() + first;
  for (int64_t oy = 0; oy < s.out_height; ++oy) {
    const float* row = image.row(oy);
    const T* grad_row = grad + oy * s.out_width;
    for (int64_t column = 0; column < s.out_width; column += kLanes) {
      const int64_t lanes = std::min(kLanes, s.out_width - column);
      __m256 g[Channels];
#pragma GCC unroll 2
      for (int c = 0; c < Channels; ++c) g[c] = load_lanes(grad_row + c * plane + column, lanes);  // lanes past the row are 0
#pragma GCC unroll 6
      for (int t = 0; t < Taps; ++t) {
        const __m256 in = _mm256_loadu_ps(row + offsets[t] + column);
#pragma GCC unroll 2
        for (int c = 0; c < Channels; ++c) acc[c][t] = _mm256_fmadd_ps(g[c], in, acc[c][t]);
      }
    }
  }
#pragma GCC unroll 2
  for (int c = 0; c < Channels; ++c) {
#pragma GCC unroll 6
    for (int t = 0; t < Taps; ++t) {
      const __m128 half = _mm_add_ps(_mm256_castps256_ps128(acc[c][t]), _mm256_extractf128_ps(acc[c][t], 1));
      const __m128 pair = _mm_add_ps(half, _mm_movehl_ps(half, half));
      sums[c * tap_count + first + t] += _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps(pair, pair, 1)));
    }
  }
}

template <int Channels, typename T>
void grad_weight_channels(const ShallowConvShape& s, const PaddedImage& image, const T* grad, float* sums) {
  const int64_t tap_count = taps(s);
  for (int64_t first = 0; first < tap_count; first += kTapBlock) {
    switch (std::min<int64_t>(kTapBlock, tap_count - first)) {
      case 1: grad_weight_tile<Channels, 1>(s, image, grad, first, sums); break;
      case 2: grad_weight_tile<Channels, 2>(s, image, grad, first, sums); break;
      case 3: grad_weight_tile<Channels, 3>(s, image, grad, first, sums); break;
      case 4: grad_weight_tile<Channels, 4>(s, image, grad, first, sums); break;
      case 5: grad_weight_tile<Channels, 5>(s, image, grad, first, sums); break;
      default: grad_weight_tile<Channels, kTapBlock>(s, image, grad, first, sums); break;
    }
  }
}

template <typename T>
std::vector<float> widened(const T* values, int64_t count) {
  std::vector<float> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) out[i] = static_cast<float>(values[i]);
  return out;
}

int64_t plane_macs(const ShallowConvShape& s) { return s.out_height * s.out_width * taps(s); }

}  // namespace

bool shallow_conv_supports(const ShallowConvShape& s) {
  return s.in_channels >= 1 && s.in_channels <= kMaxInChannels && taps(s) <= kMaxTaps && s.out_width >= kLanes && s.out_height >= 1 &&
         s.out_channels >= 1 && s.out_height == s.height + 2 * s.pad_h - s.kernel_h + 1 &&
         s.out_width == s.width + 2 * s.pad_w - s.kernel_w + 1;
}

template <typename T>
void shallow_conv_forward(const ShallowConvShape& s, const T* x, const T* w, const T* bias, T* y) {
  CHECK(shallow_conv_supports(s));
  const int64_t tap_count = taps(s), blocks = (s.out_channels + kTileChannels - 1) / kTileChannels;
  // Weights as [channel block][tap][channel of block]: a tile reads one tap's weights together.
  std::vector<float> weights(static_cast<size_t>(s.out_channels * tap_count));
  for (int64_t co = 0; co < s.out_channels; ++co) {
    const int64_t block_start = co / kTileChannels * kTileChannels, block_size = std::min(kTileChannels, s.out_channels - block_start);
    for (int64_t k = 0; k < tap_count; ++k) {
      weights[block_start * tap_count + k * block_size + co - block_start] = static_cast<float>(w[co * tap_count + k]);
    }
  }
  const std::vector<float> biases = bias ? widened(bias, s.out_channels) : std::vector<float>(static_cast<size_t>(s.out_channels), 0.0f);
  const int64_t plane_out = s.out_height * s.out_width, image_in = s.in_channels * s.height * s.width;
  // Units are (image, block of output channels) pairs in order; a chunk pads each of its images once.
  const int64_t grain = std::max<int64_t>(1, kMinChunkMacs / (plane_macs(s) * kTileChannels));
  parallel_for(0, s.batch * blocks, grain, [&](int64_t begin, int64_t end) {
    PaddedImage image(s);
    int64_t padded = -1;
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t n = unit / blocks, first = unit % blocks * kTileChannels;
      if (n != padded) {
        image.fill(x + n * image_in);
        padded = n;
      }
      const float* block_weights = weights.data() + first * tap_count;
      T* out = y + (n * s.out_channels + first) * plane_out;
      switch (std::min(kTileChannels, s.out_channels - first)) {
        case 1: forward_channels<1>(s, image, block_weights, biases.data() + first, out); break;
        case 2: forward_channels<2>(s, image, block_weights, biases.data() + first, out); break;
        case 3: forward_channels<3>(s, image, block_weights, biases.data() + first, out); break;
        default: forward_channels<kTileChannels>(s, image, block_weights, biases.data() + first, out); break;
      }
    }
  });
}

template <typename T>
void shallow_conv_grad_weight(const ShallowConvShape& s, const T* grad, const T* x, T* grad_weight) {
  CHECK(shallow_conv_supports(s));
  const int64_t tap_count = taps(s), weight_count = s.out_channels * tap_count, plane_out = s.out_height * s.out_width;
  const int64_t image_in = s.in_channels * s.height * s.width, image_macs = plane_macs(s) * s.out_channels;
  const int64_t chunks =
      std::clamp<int64_t>(std::min<int64_t>(current_num_threads(), s.batch * image_macs / kMinChunkMacs), 1, std::max<int64_t>(s.batch, 1));
  std::vector<std::vector<float>> partial(static_cast<size_t>(chunks), std::vector<float>(static_cast<size_t>(weight_count), 0.0f));
  parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
    PaddedImage image(s);
    for (int64_t chunk = begin; chunk < end; ++chunk) {
      for (int64_t n = chunk * s.batch / chunks; n < (chunk + 1) * s.batch / chunks; ++n) {
        image.fill(x + n * image_in);
        for (int64_t co = 0; co < s.out_channels; co += kGradChannels) {
          const T* g = grad + (n * s.out_channels + co) * plane_out;
          float* sums = partial[chunk].data() + co * tap_count;
          if (co + kGradChannels <= s.out_channels) {
            grad_weight_channels<kGradChannels>(s, image, g, sums);
          } else {
            grad_weight_channels<1>(s, image, g, sums);
          }
        }
      }
    }
  });
  for (int64_t i = 0; i < weight_count; ++i) {
    float total = 0.0f;
    for (const std::vector<float>& sums : partial) total += sums[i];
    grad_weight[i] = T(total);
  }
}

#else  // no AVX2: callers keep oneDNN's kernels

bool shallow_conv_supports(const ShallowConvShape&) { return false; }

template <typename T>
void shallow_conv_forward(const ShallowConvShape&, const T*, const T*, const T*, T*) {
  LOG(FATAL) << "shallow_conv_forward needs AVX2";
}

template <typename T>
void shallow_conv_grad_weight(const ShallowConvShape&, const T*, const T*, T*) {
  LOG(FATAL) << "shallow_conv_grad_weight needs AVX2";
}

#endif

template void shallow_conv_forward<float>(const ShallowConvShape&, const float*, const float*, const float*, float*);
template void shallow_conv_forward<BFloat16>(const ShallowConvShape&, const BFloat16*, const BFloat16*, const BFloat16*, BFloat16*);
template void shallow_conv_grad_weight<float>(const ShallowConvShape&, const float*, const float*, float*);
template void shallow_conv_grad_weight<BFloat16>(const ShallowConvShape&, const BFloat16*, const BFloat16*, BFloat16*);

}  // namespace flow::cpu
