#pragma once
// A network's first convolution (1-4 input channels), its ReLU and a 2x2 max pooling (stride 2)
// as one pass for oneflow_lite on AVX-512: each pooled pixel's four convolution outputs are summed
// in registers, and only the pooled result is written, channels-last. Run as three steps, the
// convolution's whole output (the LeNet's 64x32x26x26: 5.5 MB) went to memory and was read back
// by the pooling, which cost more than the convolution's arithmetic (docs/performance.md).
#include <cstdint>
#include <vector>

namespace flow::cpu {

struct ShallowConvPoolShape {
  int64_t batch = 0, in_channels = 0, height = 0, width = 0;  // the convolution's input, NCHW
  int64_t out_channels = 0, kernel_h = 0, kernel_w = 0;       // stride, dilation and groups 1, no padding
};

class ShallowConvPool {
 public:
  // Whether this CPU (AVX-512F) runs the shape: 1-4 input channels, 16, 32, 48 or 64 output
  // channels, a window of at most 36 weights per output channel, a convolution output at least
  // 2x2 (the pooling drops a last odd row or column, as max_pool2d does).
  static bool supports(const ShallowConvPoolShape& shape);
  // weight: (out_channels, in_channels, kernel_h, kernel_w); bias: out_channels values or null.
  ShallowConvPool(const ShallowConvPoolShape& shape, const float* weight, const float* bias);
  int64_t pooled_height() const { return (shape_.height - shape_.kernel_h + 1) / 2; }
  int64_t pooled_width() const { return (shape_.width - shape_.kernel_w + 1) / 2; }
  // y (batch, pooled_height, pooled_width, out_channels) = max_pool2d(relu?(conv(x, w) + bias), 2)
  // from x in NCHW. NaN propagates through the maximum and the ReLU, as flow's ops do.
  void run(const float* x, float* y, bool relu) const;

 private:
  ShallowConvPoolShape shape_;
  std::vector<float> weights_;  // (in_channels, kernel_h, kernel_w, out_channels)
  std::vector<float> bias_;     // out_channels, zeros without a bias
};

}  // namespace flow::cpu
