#pragma once
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

namespace flow {

// A tensor's sizes. Prints as (2,3), the form used in error messages.
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}
  template <typename It>
  Shape(It first, It last) : dims_(first, last) {}

  int64_t ndim() const { return static_cast<int64_t>(dims_.size()); }
  size_t size() const { return dims_.size(); }
  bool empty() const { return dims_.empty(); }
  int64_t operator[](size_t i) const { return dims_[i]; }
  int64_t& operator[](size_t i) { return dims_[i]; }
  // Element count; throws flow::Error when the product overflows int64 (a shape read from a
  // request or a file may be anything, and a wrapped count would pass every later size check).
  int64_t numel() const;
  // Bytes of a tensor of this shape with `element_size`-byte elements: throws flow::Error naming
  // `op` for a negative dimension or a count that overflows int64. Check a shape from outside
  // with it before allocating.
  int64_t nbytes(size_t element_size, const char* op = "shape") const;
  const std::vector<int64_t>& vec() const { return dims_; }
  auto begin() const { return dims_.begin(); }
  auto end() const { return dims_.end(); }
  void push_back(int64_t d) { dims_.push_back(d); }
  void insert(size_t pos, int64_t d) { dims_.insert(dims_.begin() + static_cast<std::ptrdiff_t>(pos), d); }
  void erase(size_t pos) { dims_.erase(dims_.begin() + static_cast<std::ptrdiff_t>(pos)); }
  bool operator==(const Shape& other) const = default;
  std::string str() const;

 private:
  std::vector<int64_t> dims_;
};

using Strides = std::vector<int64_t>;

std::ostream& operator<<(std::ostream& out, const Shape& shape);
Strides contiguous_strides(const Shape& shape);
// NumPy broadcasting of two shapes; throws flow::Error naming op when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const std::string& op);
// Wraps a possibly negative dim into [0, ndim); throws flow::Error naming op when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const std::string& op);

}  // namespace flow
