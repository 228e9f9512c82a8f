#pragma once
// Padding layers (torch.nn.ReflectionPad1d/2d, ReplicationPad1d/2d, ZeroPad2d, ConstantPad1d/2d):
// modules over nn::functional::pad. padding is one size for every side, or 2 * D sizes in
// F.pad's order: (left, right) for 1d, (left, right, top, bottom) for 2d.
#include <string>
#include <vector>

#include "nn/module.h"

namespace flow::nn {

// The options of the padding modules that take sizes only (reflection, replication, zero).
template <int64_t D>
struct PadSizeOptions {
  PadSizeOptions(int64_t padding) : padding_(2 * D, padding) {}
  PadSizeOptions(std::vector<int64_t> padding) : padding_(std::move(padding)) {}
  PadSizeOptions& padding(std::vector<int64_t> v) { padding_ = std::move(v); return *this; }
  std::vector<int64_t> padding_;
};
template <int64_t D>
using ReflectionPadOptions = PadSizeOptions<D>;
template <int64_t D>
using ReplicationPadOptions = PadSizeOptions<D>;
using ReflectionPad1dOptions = ReflectionPadOptions<1>;
using ReflectionPad2dOptions = ReflectionPadOptions<2>;
using ReplicationPad1dOptions = ReplicationPadOptions<1>;
using ReplicationPad2dOptions = ReplicationPadOptions<2>;
using ZeroPad2dOptions = PadSizeOptions<2>;

template <int64_t D>
struct ConstantPadOptions {
  ConstantPadOptions(int64_t padding, double value) : padding_(2 * D, padding), value_(value) {}
  ConstantPadOptions(std::vector<int64_t> padding, double value) : padding_(std::move(padding)), value_(value) {}
  ConstantPadOptions& padding(std::vector<int64_t> v) { padding_ = std::move(v); return *this; }
  ConstantPadOptions& value(double v) { value_ = v; return *this; }
  std::vector<int64_t> padding_;
  double value_;
};
using ConstantPad1dOptions = ConstantPadOptions<1>;
using ConstantPad2dOptions = ConstantPadOptions<2>;

namespace detail {
// The shared module: F.pad with a fixed mode, padding and value.
class PadImpl : public Module {
 public:
  std::string name() const override { return name_; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;
  const std::vector<int64_t>& padding() const { return padding_; }

 protected:
  // Checks that padding has 2 * dims entries (a user's options), naming the module.
  PadImpl(std::string name, std::string mode, std::vector<int64_t> padding, int64_t dims, double value = 0.0);

 private:
  std::string name_, mode_;
  std::vector<int64_t> padding_;
  double value_;
};
}  // namespace detail

class ReflectionPad1d : public detail::PadImpl {
 public:
  explicit ReflectionPad1d(const ReflectionPad1dOptions& options) : PadImpl("ReflectionPad1d", "reflect", options.padding_, 1) {}
};
class ReflectionPad2d : public detail::PadImpl {
 public:
  explicit ReflectionPad2d(const ReflectionPad2dOptions& options) : PadImpl("ReflectionPad2d", "reflect", options.padding_, 2) {}
};
class ReplicationPad1d : public detail::PadImpl {
 public:
  explicit ReplicationPad1d(const ReplicationPad1dOptions& options) : PadImpl("ReplicationPad1d", "replicate", options.padding_, 1) {}
};
class ReplicationPad2d : public detail::PadImpl {
 public:
  explicit ReplicationPad2d(const ReplicationPad2dOptions& options) : PadImpl("ReplicationPad2d", "replicate", options.padding_, 2) {}
};
class ZeroPad2d : public detail::PadImpl {
 public:
  explicit ZeroPad2d(const ZeroPad2dOptions& options) : PadImpl("ZeroPad2d", "constant", options.padding_, 2) {}
};
class ConstantPad1d : public detail::PadImpl {
 public:
  explicit ConstantPad1d(const ConstantPad1dOptions& options)
      : PadImpl("ConstantPad1d", "constant", options.padding_, 1, options.value_) {}
};
class ConstantPad2d : public detail::PadImpl {
 public:
  explicit ConstantPad2d(const ConstantPad2dOptions& options)
      : PadImpl("ConstantPad2d", "constant", options.padding_, 2, options.value_) {}
};

}  // namespace flow::nn
