#include "core/kernels/cpu/conv_blocked.h"

#include <glog/logging.h>

#include <algorithm>
#include <array>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define FLOW_BLOCKED_CONV 1
#endif

#include "core/thread_pool.h"

namespace flow::cpu {

#if defined(FLOW_BLOCKED_CONV)
namespace {

constexpr int64_t kBlock = 8;           // channels per block (one AVX2 register)
constexpr int64_t kMaxGroup = 2;        // output blocks in one register tile
constexpr int64_t kSliceBytes = 16384;  // a slice's weights for one group: half of a 32 KiB L1

// One register tile: `Pixels` consecutive outputs of a row x `Blocks` output channel blocks,
// summed over a slice of the input channel blocks and the whole kernel window (the source is
// padded, so every window lies inside it).
struct Tile {
  const float* src;     // the tile's first window: the slice's first input block, at its top-left
  const float* weight;  // the group's packed weights at the slice's first input block
  int64_t in_blocks, src_block_stride, weight_block_stride, row_stride, kernel_h, kernel_w;
  float* dst;  // the tile's first pixel in the group's first output block
  int64_t dst_block_stride;
  const float* bias;  // added when not null
  bool load_dst, relu;
};

template <int Blocks, int Pixels, int StrideW>
void run_tile(const Tile& t) {
  // GCC keeps the accumulators in registers only when every loop over them is unrolled.
  __m256 acc[Blocks][Pixels];
#pragma GCC unroll 4
  for (int b = 0; b < Blocks; ++b) {
    const __m256 bias = t.bias ? _mm256_loadu_ps(t.bias + b * kBlock) : _mm256_setzero_ps();
#pragma GCC unroll 12
    for (int p = 0; p < Pixels; ++p) {
      acc[b][p] = t.load_dst ? _mm256_add_ps(_mm256_loadu_ps(t.dst + b * t.dst_block_stride + p * kBlock), bias) : bias;
    }
  }
  constexpr int64_t weight_step = kBlock * Blocks * kBlock;  // one (kh, kw) tap's weights
  for (int64_t ib = 0; ib < t.in_blocks; ++ib) {
    const float* src_block = t.src + ib * t.src_block_stride;
    const float* w = t.weight + ib * t.weight_block_stride;
    for (int64_t kh = 0; kh < t.kernel_h; ++kh) {
      const float* src_row = src_block + kh * t.row_stride;
      for (int64_t kw = 0; kw < t.kernel_w; ++kw, w += weight_step) {
        const float* x = src_row + kw * kBlock;
#pragma GCC unroll 8
        for (int c = 0; c < kBlock; ++c) {
          __m256 wv[Blocks];
#pragma GCC unroll 4
          for (int b = 0; b < Blocks; ++b) wv[b] = _mm256_loadu_ps(w + (c * Blocks + b) * kBlock);
#pragma GCC unroll 12
          for (int p = 0; p < Pixels; ++p) {
            const __m256 xv = _mm256_broadcast_ss(x + p * StrideW * kBlock + c);
#pragma GCC unroll 4
            for (int b = 0; b < Blocks; ++b) acc[b][p] = _mm256_fmadd_ps(xv, wv[b], acc[b][p]);
          }
        }
      }
    }
  }
  const __m256 zero = _mm256_setzero_ps();
#pragma GCC unroll 4
  for (int b = 0; b < Blocks; ++b) {
#pragma GCC unroll 12
    for (int p = 0; p < Pixels; ++p) {
      // max(0, x) returns x when x is NaN (the second operand), as flow's relu keeps NaN.
      const __m256 v = t.relu ? _mm256_max_ps(zero, acc[b][p]) : acc[b][p];
      _mm256_storeu_ps(t.dst + b * t.dst_block_stride + p * kBlock, v);
    }
  }
}

// Pixels per tile for a group of `blocks` output blocks: twelve accumulators (enough independent
// FMAs to cover their latency), the group's weights and one broadcast in AVX2's 16 registers.
// Groups of 3 blocks (4 pixels) measured 10% slower than of 2 on 32 -> 64 channels.
constexpr int max_pixels(int blocks) { return blocks == 2 ? 6 : 12; }

using TileFn = void (*)(const Tile&);
using TileRow = std::array<TileFn, 12>;  // by pixels - 1

template <int StrideW, int Blocks, int... P>
constexpr TileRow tiles_of(std::integer_sequence<int, P...>) {
  return {&run_tile<Blocks, P + 1, StrideW>...};
}

// kTiles[stride_w - 1][blocks - 1][pixels - 1]
template <int StrideW>
constexpr std::array<TileRow, kMaxGroup> tile_table() {
  return {tiles_of<StrideW, 1>(std::make_integer_sequence<int, max_pixels(1)>()),
          tiles_of<StrideW, 2>(std::make_integer_sequence<int, max_pixels(2)>())};
}
constexpr std::array<std::array<TileRow, kMaxGroup>, 2> kTiles{tile_table<1>(), tile_table<2>()};

}  // namespace

bool BlockedConv::supports(const BlockedConvShape& s) {
  // 1x1 kernels stay with oneDNN's jit_1x1 (a GEMM; measured faster), as do sources of fewer
  // than 8 channels (plain NCHW there: a variant of this kernel reading it measured 1.4x oneDNN's
  // time on the CNN's 1 -> 32 layer).
  return s.in_channels % kBlock == 0 && s.out_channels % kBlock == 0 && s.in_channels > 0 &&
         s.kernel_h * s.kernel_w > 1 && s.stride_h > 0 && (s.stride_w == 1 || s.stride_w == 2) && s.pad_h >= 0 && s.pad_w >= 0 &&
         s.out_height > 0 && s.out_width > 0 && (s.out_height - 1) * s.stride_h + s.kernel_h <= s.height + 2 * s.pad_h &&
         (s.out_width - 1) * s.stride_w + s.kernel_w <= s.width + 2 * s.pad_w;
}

BlockedConv::BlockedConv(const BlockedConvShape& shape, const float* weight, const float* bias) : shape_(shape) {
  CHECK(supports(shape)) << "BlockedConv: unsupported shape";
  const BlockedConvShape& s = shape_;
  const int64_t in_blocks = s.in_channels / kBlock, out_blocks = s.out_channels / kBlock, taps = s.kernel_h * s.kernel_w;
  // Groups of at most kMaxGroup blocks, as even as they come (5 blocks: 1, 2, 2).
  const int64_t group_count = (out_blocks + kMaxGroup - 1) / kMaxGroup;
  packed_.resize(static_cast<size_t>(s.out_channels * s.in_channels * taps));
  int64_t offset = 0, first = 0;
  for (int64_t g = 0; g < group_count; ++g) {
    const int64_t blocks = (out_blocks - first) / (group_count - g), width = blocks * kBlock;
    groups_.push_back({first, blocks, offset});
    for (int64_t ib = 0; ib < in_blocks; ++ib) {
      for (int64_t tap = 0; tap < taps; ++tap) {
        for (int64_t c = 0; c < kBlock; ++c) {
          const int64_t ic = ib * kBlock + c;
          for (int64_t j = 0; j < width; ++j) {
            packed_[static_cast<size_t>(offset++)] = weight[((first * kBlock + j) * s.in_channels + ic) * taps + tap];
          }
        }
      }
    }
    first += blocks;
  }
  if (bias) bias_.assign(bias, bias + s.out_channels);
  const int64_t block_bytes = taps * kBlock * kMaxGroup * kBlock * static_cast<int64_t>(sizeof(float));
  in_blocks_per_slice_ = std::clamp<int64_t>(kSliceBytes / block_bytes, 1, in_blocks);
}

void BlockedConv::run_rows(const float* src, float* dst, int64_t image, int64_t row_begin, int64_t row_end, bool accumulate,
                           bool relu) const {
  const BlockedConvShape& s = shape_;
  const int64_t in_blocks = s.in_channels / kBlock, out_blocks = s.out_channels / kBlock;
  const float* image_src = src + image * in_blocks * s.height * s.width * kBlock;
  int64_t height = s.height, width = s.width, first_row = 0;  // of the source that image_src starts at
  if (s.pad_h > 0 || s.pad_w > 0) {
    // A zero-padded copy of the image's rows that the windows read, shared by every group: each
    // tile then runs the whole window, and no tile is cut down to one pixel at the edges.
    first_row = row_begin * s.stride_h;  // in padded rows
    height = (row_end - 1) * s.stride_h + s.kernel_h - first_row;
    width = s.width + 2 * s.pad_w;
    thread_local std::vector<float> padded;
    padded.assign(static_cast<size_t>(in_blocks * height * width * kBlock), 0.f);
    for (int64_t ib = 0; ib < in_blocks; ++ib) {
      for (int64_t r = 0; r < height; ++r) {
        const int64_t source_row = first_row + r - s.pad_h;
        if (source_row < 0 || source_row >= s.height) continue;
        std::copy_n(image_src + (ib * s.height + source_row) * s.width * kBlock, s.width * kBlock,
                    padded.data() + ((ib * height + r) * width + s.pad_w) * kBlock);
      }
    }
    image_src = padded.data();
  }
  Tile t{};
  t.src_block_stride = height * width * kBlock;
  t.row_stride = width * kBlock;
  t.kernel_h = s.kernel_h;
  t.kernel_w = s.kernel_w;
  t.dst_block_stride = s.out_height * s.out_width * kBlock;
  for (const Group& group : groups_) {
    // A row's tiles as even as they come (7 columns in tiles of up to 6: 4 and 3, not 6 and 1):
    // a tile of few pixels has too few accumulators to cover the FMA latency.
    const int64_t max_p = max_pixels(static_cast<int>(group.blocks));
    const int64_t tiles = (s.out_width + max_p - 1) / max_p, short_tile = s.out_width / tiles, long_tiles = s.out_width % tiles;
    const TileRow& fns = kTiles[static_cast<size_t>(s.stride_w - 1)][static_cast<size_t>(group.blocks - 1)];
    float* group_dst = dst + (image * out_blocks + group.first_block) * s.out_height * s.out_width * kBlock;
    t.weight_block_stride = s.kernel_h * s.kernel_w * kBlock * group.blocks * kBlock;
    for (int64_t first_in = 0; first_in < in_blocks; first_in += in_blocks_per_slice_) {
      const bool first_slice = first_in == 0, last_slice = first_in + in_blocks_per_slice_ >= in_blocks;
      const float* slice_src = image_src + first_in * t.src_block_stride;
      t.weight = packed_.data() + group.weight_offset + first_in * t.weight_block_stride;
      t.in_blocks = std::min(in_blocks_per_slice_, in_blocks - first_in);
      t.bias = first_slice && !bias_.empty() ? bias_.data() + group.first_block * kBlock : nullptr;
      t.load_dst = accumulate || !first_slice;
      t.relu = relu && last_slice;
      for (int64_t oh = row_begin; oh < row_end; ++oh) {
        const float* row_src = slice_src + (oh * s.stride_h - first_row) * t.row_stride;
        float* row_dst = group_dst + oh * s.out_width * kBlock;
        for (int64_t tile = 0, ow = 0; tile < tiles; ++tile) {
          const int64_t pixels = short_tile + (tile < long_tiles ? 1 : 0);
          t.src = row_src + ow * s.stride_w * kBlock;
          t.dst = row_dst + ow * kBlock;
          fns[static_cast<size_t>(pixels - 1)](t);
          ow += pixels;
        }
      }
    }
  }
}

void BlockedConv::run(const float* src, float* dst, bool accumulate, bool relu) const {
  const BlockedConvShape& s = shape_;
  // Enough units for the threads to balance: whole images when the batch gives that many, else
  // images split into ranges of rows (none empty: 11 rows in 8 wanted chunks are 6 of 2 rows).
  const int64_t wanted_chunks = std::clamp<int64_t>((4 * current_num_threads() + s.batch - 1) / s.batch, 1, s.out_height);
  const int64_t rows_per_chunk = (s.out_height + wanted_chunks - 1) / wanted_chunks;
  const int64_t row_chunks = (s.out_height + rows_per_chunk - 1) / rows_per_chunk;
  parallel_for(0, s.batch * row_chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t row_begin = unit % row_chunks * rows_per_chunk;
      run_rows(src, dst, unit / row_chunks, row_begin, std::min(s.out_height, row_begin + rows_per_chunk), accumulate, relu);
    }
  });
}

#else

bool BlockedConv::supports(const BlockedConvShape&) { return false; }
BlockedConv::BlockedConv(const BlockedConvShape& shape, const float*, const float*) : shape_(shape) {
  LOG(FATAL) << "BlockedConv: built without AVX2";
}
void BlockedConv::run_rows(const float*, float*, int64_t, int64_t, int64_t, bool, bool) const {}
void BlockedConv::run(const float*, float*, bool, bool) const {}

#endif

}  // namespace flow::cpu
