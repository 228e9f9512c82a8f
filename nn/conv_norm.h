#pragma once
// Convolution, pooling, normalisation and embedding layers.
#include <optional>
#include <vector>

#include "nn/module.h"

namespace flow::nn {

// Options shared by Conv2d and ConvTranspose2d; setters return the concrete options type.
template <typename Derived>
struct ConvOptionsBase {
  ConvOptionsBase(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(std::move(kernel_size)) {}
  ConvOptionsBase(int64_t in_channels, int64_t out_channels, int64_t kernel_size)
      : ConvOptionsBase(in_channels, out_channels, std::vector<int64_t>{kernel_size, kernel_size}) {}
  Derived& stride(std::vector<int64_t> v) { stride_ = std::move(v); return self(); }
  Derived& stride(int64_t v) { return stride({v, v}); }
  Derived& padding(std::vector<int64_t> v) { padding_ = std::move(v); return self(); }
  Derived& padding(int64_t v) { return padding({v, v}); }
  Derived& dilation(std::vector<int64_t> v) { dilation_ = std::move(v); return self(); }
  Derived& dilation(int64_t v) { return dilation({v, v}); }
  Derived& groups(int64_t v) { groups_ = v; return self(); }
  Derived& bias(bool v) { bias_ = v; return self(); }
  int64_t in_channels_, out_channels_;
  std::vector<int64_t> kernel_size_, stride_{1, 1}, padding_{0, 0}, dilation_{1, 1};
  int64_t groups_ = 1;
  bool bias_ = true;

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
};

struct Conv2dOptions : ConvOptionsBase<Conv2dOptions> {
  using ConvOptionsBase::ConvOptionsBase;
};

class Conv2d : public Module {
 public:
  explicit Conv2d(const Conv2dOptions& options);
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size) : Conv2d(Conv2dOptions(in_channels, out_channels, kernel_size)) {}
  std::string name() const override { return "Conv2d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;
  Tensor weight, bias;

 private:
  Conv2dOptions options_;
};

struct ConvTranspose2dOptions : ConvOptionsBase<ConvTranspose2dOptions> {
  using ConvOptionsBase::ConvOptionsBase;
  ConvTranspose2dOptions& output_padding(int64_t v) { output_padding_ = {v, v}; return *this; }
  std::vector<int64_t> output_padding_{0, 0};
};

class ConvTranspose2d : public Module {
 public:
  explicit ConvTranspose2d(const ConvTranspose2dOptions& options);
  std::string name() const override { return "ConvTranspose2d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;
  Tensor weight, bias;

 private:
  ConvTranspose2dOptions options_;
};

// Conv1d over (N, C, L) through Conv2d with a height of 1.
class Conv1d : public Module {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1, int64_t padding = 0,
         int64_t dilation = 1, int64_t groups = 1, bool bias = true);
  std::string name() const override { return "Conv1d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;
  Tensor weight, bias;

 private:
  int64_t in_channels_, out_channels_, kernel_size_, stride_, padding_, dilation_, groups_;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int64_t kernel_size, std::optional<int64_t> stride = std::nullopt, int64_t padding = 0);
  std::string name() const override { return "MaxPool2d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;

 private:
  int64_t kernel_size_, stride_, padding_;
};

// PyTorch's AvgPool2d options; stride defaults to kernel_size.
struct AvgPool2dOptions {
  AvgPool2dOptions(std::vector<int64_t> kernel_size) : kernel_size_(std::move(kernel_size)) {}
  AvgPool2dOptions(int64_t kernel_size) : kernel_size_{kernel_size, kernel_size} {}
  AvgPool2dOptions& stride(std::vector<int64_t> v) { stride_ = std::move(v); return *this; }
  AvgPool2dOptions& stride(int64_t v) { return stride({v, v}); }
  AvgPool2dOptions& padding(std::vector<int64_t> v) { padding_ = std::move(v); return *this; }
  AvgPool2dOptions& padding(int64_t v) { return padding({v, v}); }
  AvgPool2dOptions& ceil_mode(bool v) { ceil_mode_ = v; return *this; }
  AvgPool2dOptions& count_include_pad(bool v) { count_include_pad_ = v; return *this; }
  AvgPool2dOptions& divisor_override(std::optional<int64_t> v) { divisor_override_ = v; return *this; }
  std::vector<int64_t> kernel_size_, stride_, padding_{0, 0};
  bool ceil_mode_ = false, count_include_pad_ = true;
  std::optional<int64_t> divisor_override_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(AvgPool2dOptions options);
  explicit AvgPool2d(int64_t kernel_size, std::optional<int64_t> stride = std::nullopt, int64_t padding = 0);
  std::string name() const override { return "AvgPool2d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;

 private:
  AvgPool2dOptions options_;
};

// Output (oh, ow) from windows [floor(i*H/oh), ceil((i+1)*H/oh)), like PyTorch.
class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(std::vector<int64_t> output_size) : output_size_(std::move(output_size)) {}
  explicit AdaptiveAvgPool2d(int64_t output_size) : output_size_{output_size, output_size} {}
  std::string name() const override { return "AdaptiveAvgPool2d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;

 private:
  std::vector<int64_t> output_size_;
};

// Batch normalisation over (N, C) or (N, C, L) [BatchNorm1d] and (N, C, H, W) [BatchNorm2d]:
// batch statistics while training (updating running_mean/var with momentum), running statistics
// in eval mode.
class BatchNorm : public Module {
 public:
  BatchNorm(int64_t num_features, int64_t dims, double eps = 1e-5, double momentum = 0.1, bool affine = true);
  std::string name() const override { return dims_ == 2 ? "BatchNorm2d" : "BatchNorm1d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  int64_t num_features_, dims_;
  double eps_, momentum_;
};
class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true)
      : BatchNorm(num_features, 1, eps, momentum, affine) {}
};
class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true)
      : BatchNorm(num_features, 2, eps, momentum, affine) {}
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(std::vector<int64_t> normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  std::string name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;
  Tensor weight, bias;

 private:
  std::vector<int64_t> normalized_shape_;
  double eps_;
};

// Root-mean-square normalisation over the trailing normalized_shape dims (PyTorch 2.4's
// nn.RMSNorm): eps std::nullopt takes the input dtype's machine epsilon at each call.
class RMSNorm : public Module {
 public:
  explicit RMSNorm(std::vector<int64_t> normalized_shape, std::optional<double> eps = std::nullopt, bool elementwise_affine = true);
  std::string name() const override { return "RMSNorm"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;
  Tensor weight;

 private:
  std::vector<int64_t> normalized_shape_;
  std::optional<double> eps_;
};

class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  std::string name() const override { return "GroupNorm"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;
  Tensor weight, bias;

 private:
  int64_t num_groups_, num_channels_;
  double eps_;
};

// A lookup table of num_embeddings rows. With padding_idx (negative counts from the end) that row
// starts at zeros and receives no gradient, as in PyTorch.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx = std::nullopt);
  std::string name() const override { return "Embedding"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& indices) override;
  Tensor weight;

 private:
  int64_t num_embeddings_, embedding_dim_;
  std::optional<int64_t> padding_idx_;  // wrapped to [0, num_embeddings)
};

}  // namespace flow::nn
