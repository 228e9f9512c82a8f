#include "nn/conv_norm.h"

#include <cmath>
#include <sstream>

#include "core/grad_mode.h"
#include "core/ops/all.h"
#include "nn/functional.h"
#include "nn/init.h"

namespace flow::nn {
namespace {
std::string pair_repr(const std::vector<int64_t>& v) { return "(" + std::to_string(v[0]) + ", " + std::to_string(v[1]) + ")"; }
std::string number(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// PyTorch's conv init: kaiming_uniform_(a=sqrt(5)) for the weight, U(+-1/sqrt(fan_in)) for the bias.
void init_conv(Tensor& weight, Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(init::calculate_fan_in_and_fan_out(weight).first));
    init::uniform_(bias, -bound, bound);
  }
}

}  // namespace

Conv2d::Conv2d(const Conv2dOptions& options) : options_(options) {
  if (options.groups_ < 1 || options.in_channels_ % options.groups_ || options.out_channels_ % options.groups_) {
    fail("Conv2d", "groups ", options.groups_, " must divide in_channels ", options.in_channels_, " and out_channels ", options.out_channels_);
  }
  weight = register_parameter("weight", empty({options.out_channels_, options.in_channels_ / options.groups_, options.kernel_size_[0],
                                               options.kernel_size_[1]}));
  if (options.bias_) bias = register_parameter("bias", empty({options.out_channels_}));
  init_conv(weight, bias);
}

std::string Conv2d::extra_repr() const {
  std::string s = std::to_string(options_.in_channels_) + ", " + std::to_string(options_.out_channels_) +
                  ", kernel_size=" + pair_repr(options_.kernel_size_) + ", stride=" + pair_repr(options_.stride_);
  if (options_.padding_ != std::vector<int64_t>{0, 0}) s += ", padding=" + pair_repr(options_.padding_);
  if (options_.dilation_ != std::vector<int64_t>{1, 1}) s += ", dilation=" + pair_repr(options_.dilation_);
  if (options_.groups_ != 1) s += ", groups=" + std::to_string(options_.groups_);
  if (!options_.bias_) s += ", bias=False";
  return s;
}

Tensor Conv2d::forward(const Tensor& input) {
  return conv2d(input, weight, bias, options_.stride_, options_.padding_, options_.dilation_, options_.groups_);
}

ConvTranspose2d::ConvTranspose2d(const ConvTranspose2dOptions& options) : options_(options) {
  if (options.groups_ < 1 || options.in_channels_ % options.groups_ || options.out_channels_ % options.groups_) {
    fail("ConvTranspose2d", "groups ", options.groups_, " must divide in_channels ", options.in_channels_, " and out_channels ",
         options.out_channels_);
  }
  weight = register_parameter("weight", empty({options.in_channels_, options.out_channels_ / options.groups_, options.kernel_size_[0],
                                               options.kernel_size_[1]}));
  if (options.bias_) bias = register_parameter("bias", empty({options.out_channels_}));
  init_conv(weight, bias);
}

std::string ConvTranspose2d::extra_repr() const {
  std::string s = std::to_string(options_.in_channels_) + ", " + std::to_string(options_.out_channels_) +
                  ", kernel_size=" + pair_repr(options_.kernel_size_) + ", stride=" + pair_repr(options_.stride_);
  if (options_.padding_ != std::vector<int64_t>{0, 0}) s += ", padding=" + pair_repr(options_.padding_);
  if (options_.output_padding_ != std::vector<int64_t>{0, 0}) s += ", output_padding=" + pair_repr(options_.output_padding_);
  if (!options_.bias_) s += ", bias=False";
  return s;
}

Tensor ConvTranspose2d::forward(const Tensor& input) {
  return conv_transpose2d(input, weight, bias, options_.stride_, options_.padding_, options_.output_padding_, options_.dilation_,
                          options_.groups_);
}

Conv1d::Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride, int64_t padding,
               int64_t dilation, int64_t groups, bool has_bias)
    : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size), stride_(stride), padding_(padding),
      dilation_(dilation), groups_(groups) {
  if (groups < 1 || in_channels % groups || out_channels % groups) fail("Conv1d", "groups ", groups, " must divide the channels");
  weight = register_parameter("weight", empty({out_channels, in_channels / groups, kernel_size}));
  if (has_bias) bias = register_parameter("bias", empty({out_channels}));
  init_conv(weight, bias);
}

std::string Conv1d::extra_repr() const {
  std::string s = std::to_string(in_channels_) + ", " + std::to_string(out_channels_) + ", kernel_size=(" +
                  std::to_string(kernel_size_) + ",), stride=(" + std::to_string(stride_) + ",)";
  if (padding_) s += ", padding=(" + std::to_string(padding_) + ",)";
  if (!bias.defined()) s += ", bias=False";
  return s;
}

Tensor Conv1d::forward(const Tensor& input) {
  if (input.dim() != 3) fail("Conv1d", "expected 3-d input (N,C,L), got ", input.shape());
  return conv2d(input.unsqueeze(2), weight.unsqueeze(2), bias, {1, stride_}, {0, padding_}, {1, dilation_}, groups_).squeeze(2);
}

MaxPool2d::MaxPool2d(int64_t kernel_size, std::optional<int64_t> stride, int64_t padding)
    : kernel_size_(kernel_size), stride_(stride.value_or(kernel_size)), padding_(padding) {}
std::string MaxPool2d::extra_repr() const {
  return "kernel_size=" + std::to_string(kernel_size_) + ", stride=" + std::to_string(stride_) + ", padding=" + std::to_string(padding_) +
         ", dilation=1, ceil_mode=False";
}
Tensor MaxPool2d::forward(const Tensor& input) {
  return max_pool2d(input, {kernel_size_, kernel_size_}, {stride_, stride_}, {padding_, padding_});
}

AvgPool2d::AvgPool2d(AvgPool2dOptions options) : options_(std::move(options)) {
  if (options_.stride_.empty()) options_.stride_ = options_.kernel_size_;
}
AvgPool2d::AvgPool2d(int64_t kernel_size, std::optional<int64_t> stride, int64_t padding)
    : AvgPool2d(AvgPool2dOptions(kernel_size).stride(stride.value_or(kernel_size)).padding(padding)) {}
// PyTorch's: single numbers where both sides agree; the other options are not printed.
std::string AvgPool2d::extra_repr() const {
  auto size = [](const std::vector<int64_t>& v) {
    if (v.size() == 2 && v[0] == v[1]) return std::to_string(v[0]);
    std::string tuple = "(";
    for (size_t i = 0; i < v.size(); ++i) tuple += (i ? ", " : "") + std::to_string(v[i]);
    return tuple + ")";
  };
  return "kernel_size=" + size(options_.kernel_size_) + ", stride=" + size(options_.stride_) + ", padding=" + size(options_.padding_);
}
Tensor AvgPool2d::forward(const Tensor& input) {
  return avg_pool2d(input, options_.kernel_size_, options_.stride_, options_.padding_, options_.ceil_mode_, options_.count_include_pad_,
                    options_.divisor_override_);
}

std::string AdaptiveAvgPool2d::extra_repr() const { return "output_size=" + pair_repr(output_size_); }

Tensor AdaptiveAvgPool2d::forward(const Tensor& input) {
  if (input.dim() != 4) fail("AdaptiveAvgPool2d", "expected 4-d input (N,C,H,W), got ", input.shape());
  const int64_t h = input.size(2), w = input.size(3), oh = output_size_[0], ow = output_size_[1];
  if (oh < 1 || ow < 1) fail("AdaptiveAvgPool2d", "output size must be positive, got ", Shape(output_size_));
  if (h % oh == 0 && w % ow == 0) return avg_pool2d(input, {h / oh, w / ow});
  TensorList rows;
  for (int64_t i = 0; i < oh; ++i) {
    TensorList cells;
    const int64_t y0 = i * h / oh, y1 = ((i + 1) * h + oh - 1) / oh;
    for (int64_t j = 0; j < ow; ++j) {
      const int64_t x0 = j * w / ow, x1 = ((j + 1) * w + ow - 1) / ow;
      cells.push_back(mean(input.slice(2, y0, y1).slice(3, x0, x1), {2, 3}));
    }
    rows.push_back(stack(cells, 2));
  }
  return stack(rows, 2);
}

BatchNorm::BatchNorm(int64_t num_features, int64_t dims, double eps, double momentum, bool affine)
    : num_features_(num_features), dims_(dims), eps_(eps), momentum_(momentum) {
  if (affine) {
    weight = register_parameter("weight", ones({num_features}));
    bias = register_parameter("bias", zeros({num_features}));
  }
  running_mean = register_buffer("running_mean", zeros({num_features}));
  running_var = register_buffer("running_var", ones({num_features}));
  num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, kInt64));
}

std::string BatchNorm::extra_repr() const {
  return std::to_string(num_features_) + ", eps=" + number(eps_) + ", momentum=" + number(momentum_) +
         ", affine=" + (weight.defined() ? "True" : "False") + ", track_running_stats=True";
}

Tensor BatchNorm::forward(const Tensor& input) {
  const int64_t expected = dims_ + 2;
  if (input.dim() != expected && !(dims_ == 1 && input.dim() == 2)) {
    fail(name(), "expected ", dims_ == 1 ? "2-d or 3-d" : "4-d", " input, got ", input.shape());
  }
  if (input.size(1) != num_features_) fail(name(), "expected ", num_features_, " channels, got input ", input.shape());
  if (is_training()) {
    autograd::NoGradGuard no_grad;
    num_batches_tracked.copy_(num_batches_tracked + 1);
  }
  return functional::batch_norm(input, running_mean, running_var, weight, bias, is_training(), momentum_, eps_);
}

LayerNorm::LayerNorm(std::vector<int64_t> normalized_shape, double eps, bool elementwise_affine)
    : normalized_shape_(std::move(normalized_shape)), eps_(eps) {
  if (elementwise_affine) {
    weight = register_parameter("weight", ones(Shape(normalized_shape_)));
    bias = register_parameter("bias", zeros(Shape(normalized_shape_)));
  }
}

std::string LayerNorm::extra_repr() const {
  std::string dims;
  for (int64_t d : normalized_shape_) dims += std::to_string(d) + ",";
  return "(" + dims + "), eps=" + number(eps_) + ", elementwise_affine=" + (weight.defined() ? "True" : "False");
}

Tensor LayerNorm::forward(const Tensor& input) { return functional::layer_norm(input, normalized_shape_, weight, bias, eps_); }

RMSNorm::RMSNorm(std::vector<int64_t> normalized_shape, std::optional<double> eps, bool elementwise_affine)
    : normalized_shape_(std::move(normalized_shape)), eps_(eps) {
  if (elementwise_affine) weight = register_parameter("weight", ones(Shape(normalized_shape_)));
}

std::string RMSNorm::extra_repr() const {
  std::string dims;
  for (int64_t d : normalized_shape_) dims += std::to_string(d) + ",";
  return "(" + dims + "), eps=" + (eps_ ? number(*eps_) : "None") + ", elementwise_affine=" + (weight.defined() ? "True" : "False");
}

Tensor RMSNorm::forward(const Tensor& input) { return functional::rms_norm(input, normalized_shape_, weight, eps_); }

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, double eps, bool affine)
    : num_groups_(num_groups), num_channels_(num_channels), eps_(eps) {
  if (num_groups < 1 || num_channels % num_groups) fail("GroupNorm", "num_channels ", num_channels, " must be divisible by num_groups ", num_groups);
  if (affine) {
    weight = register_parameter("weight", ones({num_channels}));
    bias = register_parameter("bias", zeros({num_channels}));
  }
}

std::string GroupNorm::extra_repr() const {
  return std::to_string(num_groups_) + ", " + std::to_string(num_channels_) + ", eps=" + number(eps_) +
         ", affine=" + (weight.defined() ? "True" : "False");
}

Tensor GroupNorm::forward(const Tensor& input) {
  if (input.dim() < 2 || input.size(1) != num_channels_) fail("GroupNorm", "expected input with ", num_channels_, " channels, got ", input.shape());
  return functional::group_norm(input, num_groups_, weight, bias, eps_);
}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx)
    : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {
  if (padding_idx) {
    FLOW_ARG_CHECK(*padding_idx >= -num_embeddings && *padding_idx < num_embeddings, "Embedding",
                   "Padding_idx must be within num_embeddings, got ", *padding_idx, " for ", num_embeddings, " embeddings");
    padding_idx_ = *padding_idx < 0 ? *padding_idx + num_embeddings : *padding_idx;
  }
  weight = register_parameter("weight", empty({num_embeddings, embedding_dim}));
  init::normal_(weight);
  if (padding_idx_) {
    autograd::NoGradGuard no_grad;
    weight.select(0, *padding_idx_).fill_(0);
  }
}

std::string Embedding::extra_repr() const {
  return std::to_string(num_embeddings_) + ", " + std::to_string(embedding_dim_) +
         (padding_idx_ ? ", padding_idx=" + std::to_string(*padding_idx_) : "");
}

Tensor Embedding::forward(const Tensor& indices) { return functional::embedding(indices, weight, padding_idx_); }

}  // namespace flow::nn
