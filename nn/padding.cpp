#include "nn/padding.h"

#include <sstream>

#include "nn/functional.h"

namespace flow::nn::detail {

PadImpl::PadImpl(std::string name, std::string mode, std::vector<int64_t> padding, int64_t dims, double value)
    : name_(std::move(name)), mode_(std::move(mode)), padding_(std::move(padding)), value_(value) {
  FLOW_ARG_CHECK(static_cast<int64_t>(padding_.size()) == 2 * dims, name_, "padding must be one size or ", 2 * dims, " sizes, got ",
                 padding_.size());
}

// PyTorch's: "(3, 1)" for reflection, replication and zero padding, "padding=(3, 1), value=0.5" for constant.
std::string PadImpl::extra_repr() const {
  std::ostringstream out;
  out << "(";
  for (size_t i = 0; i < padding_.size(); ++i) out << (i ? ", " : "") << padding_[i];
  out << ")";
  if (name_.rfind("ConstantPad", 0) != 0) return out.str();
  std::ostringstream value;
  value << value_;
  return "padding=" + out.str() + ", value=" + value.str();
}

Tensor PadImpl::forward(const Tensor& input) { return functional::pad(input, padding_, mode_, value_); }

}  // namespace flow::nn::detail
