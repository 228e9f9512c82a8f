#pragma once
#include <functional>
#include <optional>
#include <vector>

#include "core/tensor.h"

namespace flow {

// Options for creating tensors, with chained setters: TensorOptions().dtype(kFloat64).device("cuda").
struct TensorOptions {
  std::optional<DType> dtype_;
  Device device_ = default_device();
  bool requires_grad_ = false;
  // A global tensor: made whole on every rank of the placement, each keeping its piece.
  std::optional<Placement> placement_;
  NdSbp sbp_;

  TensorOptions() = default;
  TensorOptions(DType dtype) : dtype_(dtype) {}     // NOLINT: implicit, so zeros({2}, kInt64) works
  TensorOptions(Device device) : device_(device) {}  // NOLINT
  TensorOptions& dtype(DType dtype) { dtype_ = dtype; return *this; }
  TensorOptions& device(Device device) { device_ = device; return *this; }
  TensorOptions& requires_grad(bool requires_grad) { requires_grad_ = requires_grad; return *this; }
  TensorOptions& placement(const Placement& placement) { placement_ = placement; return *this; }
  TensorOptions& sbp(NdSbp nd_sbp) { sbp_ = std::move(nd_sbp); return *this; }
  TensorOptions& sbp(const Sbp& sbp) { sbp_ = NdSbp{sbp}; return *this; }
  DType dtype_or(DType fallback) const { return dtype_.value_or(fallback); }
};

Tensor empty(const Shape& shape, const TensorOptions& options = {});
Tensor zeros(const Shape& shape, const TensorOptions& options = {});
Tensor ones(const Shape& shape, const TensorOptions& options = {});
// dtype defaults to float32 for a floating value, int64 for an integral one, bool for a bool.
Tensor full(const Shape& shape, const Scalar& value, const TensorOptions& options = {});
// [start, end) with step; int64 when all bounds are integral, else float32.
Tensor arange(const Scalar& end, const TensorOptions& options = {});
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step = 1, const TensorOptions& options = {});
Tensor linspace(const Scalar& start, const Scalar& end, int64_t steps, const TensorOptions& options = {});
Tensor eye(int64_t n, std::optional<int64_t> m = std::nullopt, const TensorOptions& options = {});

// Random tensors from the default generator (see manual_seed).
Tensor rand(const Shape& shape, const TensorOptions& options = {});
Tensor randn(const Shape& shape, const TensorOptions& options = {});
// Integers uniform in [low, high); int64 by default.
Tensor randint(int64_t low, int64_t high, const Shape& shape, const TensorOptions& options = {});
// A random permutation of 0..n-1; int64 by default.
Tensor randperm(int64_t n, const TensorOptions& options = {});

// Options for a helper tensor (a fill value, a zero buffer) used beside `other` in an op: its
// dtype and device, and for a global `other` its placement with every dimension broadcast.
TensorOptions options_beside(const Tensor& other);
Tensor empty_like(const Tensor& other, const TensorOptions& options = {});
Tensor zeros_like(const Tensor& other, const TensorOptions& options = {});
Tensor ones_like(const Tensor& other, const TensorOptions& options = {});
Tensor full_like(const Tensor& other, const Scalar& value, const TensorOptions& options = {});
Tensor rand_like(const Tensor& other, const TensorOptions& options = {});
Tensor randn_like(const Tensor& other, const TensorOptions& options = {});

// Copies values into a new tensor of shape (default: 1-d of values.size()) and T's dtype,
// then converts to options' dtype/device when given.
template <typename T>
Tensor tensor(const std::vector<T>& values, std::optional<Shape> shape = std::nullopt, const TensorOptions& options = {});
// A 0-d tensor holding value.
Tensor scalar_tensor(const Scalar& value, const TensorOptions& options = {});
// Wraps memory the caller owns, without copying (torch::from_blob): a tensor of options' dtype
// (float32 by default) on options' device, which is where the memory must be, contiguous or with
// the given strides (in elements). Writes through the tensor change the caller's memory. Without
// a deleter the caller keeps the memory alive while the tensor or any view of it lives; with
// one, deleter(data) runs once the last of them is gone. clone() it for a tensor of its own.
Tensor from_blob(void* data, const Shape& shape, const TensorOptions& options = {});
Tensor from_blob(void* data, const Shape& shape, std::function<void(void*)> deleter, const TensorOptions& options = {});
Tensor from_blob(void* data, const Shape& shape, const Strides& strides, const TensorOptions& options = {});
Tensor from_blob(void* data, const Shape& shape, const Strides& strides, std::function<void(void*)> deleter,
                 const TensorOptions& options = {});

namespace detail {
// A new CPU tensor holding a copy of numel(shape) elements of dtype read from `data`.
Tensor copy_from_host(const void* data, const Shape& shape, DType dtype);
}  // namespace detail

}  // namespace flow
