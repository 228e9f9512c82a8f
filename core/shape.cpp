#include "core/shape.h"

#include <algorithm>
#include <optional>
#include <sstream>

#include "core/error.h"

namespace flow {

namespace {
// Product of dims, or nullopt when it overflows int64 (a zero dimension makes any product of the
// others harmless).
std::optional<int64_t> checked_product(const std::vector<int64_t>& dims, int64_t factor) {
  int64_t n = factor;
  bool overflow = false;
  for (int64_t d : dims) overflow |= __builtin_mul_overflow(n, d, &n);
  if (!overflow) return n;
  if (factor == 0 || std::find(dims.begin(), dims.end(), 0) != dims.end()) return 0;
  return std::nullopt;
}
}  // namespace

int64_t Shape::numel() const {
  const std::optional<int64_t> n = checked_product(dims_, 1);
  if (!n) fail("shape", str(), " has more elements than int64 can count");
  return *n;
}

int64_t Shape::nbytes(size_t element_size, const char* op) const {
  for (int64_t d : dims_) {
    if (d < 0) fail(op, "negative dimension in shape ", str());
  }
  const std::optional<int64_t> n = checked_product(dims_, static_cast<int64_t>(element_size));
  if (!n) fail(op, "shape ", str(), " of ", element_size, "-byte elements has more bytes than int64 can count");
  return *n;
}

std::string Shape::str() const {
  std::ostringstream out;
  out << "(";
  for (size_t i = 0; i < dims_.size(); ++i) out << (i ? "," : "") << dims_[i];
  if (dims_.size() == 1) out << ",";
  out << ")";
  return out.str();
}

std::ostream& operator<<(std::ostream& out, const Shape& shape) { return out << shape.str(); }

Strides contiguous_strides(const Shape& shape) {
  Strides strides(shape.size());
  int64_t stride = 1;
  for (int64_t i = shape.ndim() - 1; i >= 0; --i) {
    strides[i] = stride;
    // An empty tensor's other dims may be anything; its strides must still be countable.
    if (__builtin_mul_overflow(stride, std::max<int64_t>(shape[i], 1), &stride) && i > 0) {
      fail("shape", shape.str(), " has strides larger than int64 can count");
    }
  }
  return strides;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const std::string& op) {
  const size_t n = std::max(a.size(), b.size());
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) {
      fail(op, "shapes ", a, " and ", b, " cannot be broadcast together (dim ", i, ": ", da, " vs ", db, ")");
    }
    out[i] = da == 1 ? db : da;
  }
  return Shape(std::move(out));
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const std::string& op) {
  const int64_t rank = std::max<int64_t>(ndim, 1);  // a 0-d tensor accepts dim 0 and -1
  if (dim < -rank || dim >= rank) {
    fail(op, "dim ", dim, " out of range for a tensor of ", ndim, " dimension", ndim == 1 ? "" : "s",
         " (expected in [", -rank, ", ", rank - 1, "])");
  }
  return dim < 0 ? dim + rank : dim;
}

}  // namespace flow
