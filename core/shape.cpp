#include "core/shape.h"

#include <sstream>

#include "core/error.h"

namespace flow {

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
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
    stride *= std::max<int64_t>(shape[i], 1);
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
