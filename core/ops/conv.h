#pragma once
#include <optional>
#include <vector>

#include "core/tensor.h"

namespace flow {

// 2-d convolution (cross-correlation) of input (N, C, H, W) with weight (O, C/groups, kH, kW)
// and optional bias (O); stride, padding and dilation are (h, w) pairs.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), std::vector<int64_t> stride = {1, 1},
              std::vector<int64_t> padding = {0, 0}, std::vector<int64_t> dilation = {1, 1}, int64_t groups = 1);
// Transposed convolution (the adjoint of conv2d): weight (C_in, C_out/groups, kH, kW).
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(),
                        std::vector<int64_t> stride = {1, 1}, std::vector<int64_t> padding = {0, 0},
                        std::vector<int64_t> output_padding = {0, 0}, std::vector<int64_t> dilation = {1, 1}, int64_t groups = 1);
// Max over (kH, kW) windows; windows past the padded edge are not taken (ceil_mode=false).
Tensor max_pool2d(const Tensor& input, std::vector<int64_t> kernel_size, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {0, 0});
// Mean over windows, as PyTorch's: ceil_mode rounds the output size up (a window that would
// start in the right padding is dropped), the divisor is divisor_override when given, else the
// window clipped to the padded input (count_include_pad) or to the input. The defaults run the
// avg_pool2d primitive; other options a composite of it (zero padding, then a per-window scale).
Tensor avg_pool2d(const Tensor& input, std::vector<int64_t> kernel_size, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {0, 0}, bool ceil_mode = false, bool count_include_pad = true,
                  std::optional<int64_t> divisor_override = std::nullopt);

}  // namespace flow
