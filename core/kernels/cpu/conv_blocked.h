#pragma once
// A direct float32 convolution from nChw8c to nChw8c (AVX2 + FMA), for oneflow_lite's blocked
// layout pass. oneDNN 2.6's AVX2 kernel (jit:avx2) cuts its register tiles down to one pixel at
// padded edges and keeps one 8-channel block per tile on 8-channel layers; this one copies each
// unit's source rows zero-padded, so every tile runs whole, and keeps twelve accumulators (12
// pixels x 8 channels or 6 x 16) over a slice of the input channels whose weights fit half of L1. Measured against oneDNN in docs/performance.md.
#include <cstdint>
#include <vector>

namespace flow::cpu {

struct BlockedConvShape {
  int64_t batch = 0, in_channels = 0, height = 0, width = 0;
  int64_t out_channels = 0, out_height = 0, out_width = 0;
  int64_t kernel_h = 0, kernel_w = 0, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
};

class BlockedConv {
 public:
  // Whether this build and shape can run here: AVX2 code, channels in and out multiples of 8, a
  // window larger than 1x1, a column stride of 1 or 2; groups and dilation 1 are the caller's part.
  static bool supports(const BlockedConvShape& shape);

  // weight: (out, in, kh, kw) row-major; bias: out_channels values or null. Both are copied.
  BlockedConv(const BlockedConvShape& shape, const float* weight, const float* bias);

  // dst = conv(src) + bias, or dst += conv(src) + bias when accumulate (a residual already in
  // dst), then ReLU when relu (NaN kept, as flow's relu does). Splits the work over
  // current_num_threads().
  void run(const float* src, float* dst, bool accumulate, bool relu) const;

 private:
  struct Group {
    int64_t first_block, blocks;  // output channel blocks of 8
    int64_t weight_offset;        // into packed_: [in block][kh][kw][in channel of block][blocks * 8]
  };
  // Output rows [row_begin, row_end) of one image, every group.
  void run_rows(const float* src, float* dst, int64_t image, int64_t row_begin, int64_t row_end, bool accumulate, bool relu) const;

  BlockedConvShape shape_;
  std::vector<Group> groups_;
  std::vector<float> packed_, bias_;
  int64_t in_blocks_per_slice_ = 1;  // input channel blocks whose weights one pass keeps in L1
};

}  // namespace flow::cpu
