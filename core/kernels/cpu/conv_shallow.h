#pragma once
// Direct convolution of layers with few input channels (an image's 1-4: a network's first layer)
// on flow's own NCHW buffers, float32 and bfloat16 (widened, summed in float32, rounded once), for
// the forward pass and the weight gradient. oneDNN's kernels for these layers run in its blocked
// or channels-last layouts, so each call paid a reorder of the whole (many-channel) output or
// output gradient besides the convolution; on the LeNet's 1 -> 32 layer (batch 64) that was more
// than the convolution itself, and oneDNN's bfloat16 weight gradient is twice its float32 one.
// Measured in docs/performance.md.
#include <cstdint>

#include "core/half.h"

namespace flow::cpu {

struct ShallowConvShape {
  int64_t batch = 0, in_channels = 0, height = 0, width = 0;
  int64_t out_channels = 0, out_height = 0, out_width = 0;
  int64_t kernel_h = 0, kernel_w = 0, pad_h = 0, pad_w = 0;  // stride, dilation and groups 1
};

// Whether this build (AVX2 + FMA) runs the shape here: 1-4 input channels, a window of at most 36
// weights per output channel, outputs at least 8 columns wide (the kernels work on rows of 8).
bool shallow_conv_supports(const ShallowConvShape& shape);

// y = conv(x, w) + bias; bias may be null. T is float or BFloat16. Work splits over images and
// output channels on the thread pool.
template <typename T>
void shallow_conv_forward(const ShallowConvShape& shape, const T* x, const T* w, const T* bias, T* y);

// grad_weight = the gradient of conv(x, w) with respect to w, given the output gradient grad.
// Images split over the thread pool; their partial sums add up in a fixed order.
template <typename T>
void shallow_conv_grad_weight(const ShallowConvShape& shape, const T* grad, const T* x, T* grad_weight);

}  // namespace flow::cpu
