// Tensor printing in the PyTorch/OneFlow repr style:
//   tensor([[ 3.2023,  2.9805, -2.6793]], dtype=flow.float32)
// Values are formatted together (fixed, integer-valued or scientific, chosen from the range of
// the values shown), right-aligned to a common width; tensors over 1000 elements are summarised
// with `...` keeping 3 items at each edge.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace flow {
namespace {

constexpr int64_t kThreshold = 1000;
constexpr int64_t kEdgeItems = 3;
constexpr int64_t kLineWidth = 80;
constexpr int kPrecision = 4;

struct Formatter {
  enum class Mode { kFixed, kInteger, kScientific, kIntegral, kBool };
  Mode mode = Mode::kFixed;
  size_t width = 1;

  std::string format(double v) const {
    char buffer[64];
    if (mode == Mode::kBool) return v != 0 ? "True" : "False";
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    switch (mode) {
      case Mode::kIntegral: std::snprintf(buffer, sizeof buffer, "%lld", static_cast<long long>(v)); break;
      case Mode::kInteger: std::snprintf(buffer, sizeof buffer, "%.0f.", v); break;
      case Mode::kScientific: std::snprintf(buffer, sizeof buffer, "%.*e", kPrecision, v); break;
      default: std::snprintf(buffer, sizeof buffer, "%.*f", kPrecision, v); break;
    }
    return buffer;
  }
  std::string padded(double v) const {
    std::string s = format(v);
    return std::string(width > s.size() ? width - s.size() : 0, ' ') + s;
  }
};

// The elements that will be shown (edges only when summarising), as doubles, in index order.
void collect(const Tensor& t, bool summarize, std::vector<double>& values) {
  if (t.dim() == 0) {
    values.push_back(t.item<double>());
    return;
  }
  const int64_t n = t.size(0);
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) i = n - kEdgeItems;
    collect(t.select(0, i), summarize, values);
  }
}

Formatter make_formatter(DType dtype, const std::vector<double>& values) {
  Formatter f;
  if (dtype == kBool) {
    f.mode = Formatter::Mode::kBool;
  } else if (!is_floating(dtype)) {
    f.mode = Formatter::Mode::kIntegral;
  } else {
    bool all_integer = true;
    double max_abs = 0, min_abs = INFINITY;
    bool any_finite_nonzero = false;
    for (double v : values) {
      if (!std::isfinite(v)) continue;
      if (v != std::nearbyint(v)) all_integer = false;
      if (v == 0) continue;
      any_finite_nonzero = true;
      max_abs = std::max(max_abs, std::fabs(v));
      min_abs = std::min(min_abs, std::fabs(v));
    }
    if (all_integer) {
      f.mode = any_finite_nonzero && max_abs > 1e8 ? Formatter::Mode::kScientific : Formatter::Mode::kInteger;
    } else if (any_finite_nonzero && (max_abs / min_abs > 1000.0 || max_abs > 1e8 || min_abs < 1e-4)) {
      f.mode = Formatter::Mode::kScientific;
    }
  }
  for (double v : values) f.width = std::max(f.width, f.format(v).size());
  return f;
}

void print_rows(std::string& out, const Tensor& t, const Formatter& f, bool summarize, size_t indent) {
  if (t.dim() == 0) {
    out += f.format(t.item<double>());
    return;
  }
  const int64_t n = t.size(0);
  out += "[";
  if (t.dim() == 1) {
    const int64_t per_line = std::max<int64_t>(1, (kLineWidth - static_cast<int64_t>(indent) - 1) /
                                                      static_cast<int64_t>(f.width + 2));
    int64_t on_line = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (i > 0) {
        out += ",";
        if (on_line == per_line) {
          out += "\n" + std::string(indent + 1, ' ');
          on_line = 0;
        } else {
          out += " ";
        }
      }
      if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
        out += " ...,";
        out += " ";
        i = n - kEdgeItems;
        ++on_line;
      }
      out += f.padded(t.select(0, i).item<double>());
      ++on_line;
    }
  } else {
    const std::string separator = "," + std::string(static_cast<size_t>(t.dim() - 1), '\n') + std::string(indent + 1, ' ');
    for (int64_t i = 0; i < n; ++i) {
      if (i > 0) out += separator;
      if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
        out += "..." + separator;
        i = n - kEdgeItems;
      }
      print_rows(out, t.select(0, i), f, summarize, indent + 1);
    }
  }
  out += "]";
}

}  // namespace

std::ostream& operator<<(std::ostream& out, const Tensor& tensor) {
  if (!tensor.defined()) return out << "tensor(undefined)";
  std::string suffix;
  if (tensor.is_global()) {
    // OneFlow's form; the values are the logical tensor's, gathered (every rank prints).
    suffix += ", placement=" + tensor.placement().str() + ", sbp=" + nd_sbp_str(tensor.sbp());
  } else if (!tensor.device().is_cpu()) {
    suffix += ", device='" + tensor.device().str() + "'";
  }
  suffix += ", dtype=flow." + dtype_name(tensor.dtype()) + ")";
  if (tensor.is_lazy() || tensor.device().is_meta()) {
    std::string dims;
    for (int64_t d : tensor.shape()) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
    return out << "tensor(..., " << (tensor.is_lazy() ? "is_lazy='True', " : "") << "size=(" << dims << ")" << suffix;
  }
  if (tensor.numel() == 0 && tensor.dim() != 1) {
    std::string dims;
    for (int64_t d : tensor.shape()) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
    return out << "tensor([], size=(" << dims << ")" << suffix;
  }
  const Tensor host = tensor.whole_local().cpu();
  const bool summarize = host.numel() > kThreshold;
  std::vector<double> values;
  collect(host, summarize, values);
  const Formatter formatter = make_formatter(host.dtype(), values);
  std::string body = "tensor(";
  print_rows(body, host, formatter, summarize, body.size());
  return out << body << suffix;
}

}  // namespace flow
