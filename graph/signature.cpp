#include "graph/signature.h"

#include <sstream>

namespace flow::graph {
namespace {

std::string shape_str(const Shape& shape) {
  std::ostringstream out;
  out << "(";
  for (int64_t d = 0; d < shape.ndim(); ++d) out << (d ? ", " : "") << shape[d];
  out << (shape.ndim() == 1 ? ",)" : ")");
  return out.str();
}

std::string placement_str(const std::optional<Placement>& placement) { return placement ? placement->str() : "none (local)"; }

}  // namespace

bool InputGuard::operator==(const InputGuard& other) const {
  return meta.shape == other.meta.shape && meta.dtype == other.meta.dtype && meta.device == other.meta.device &&
         placement == other.placement && sbp == other.sbp;
}

InputGuard guard_of(const Tensor& t) {
  InputGuard guard{{t.shape(), t.dtype(), t.device()}, std::nullopt, {}};
  if (t.is_global()) {
    guard.placement = t.placement();
    guard.sbp = t.sbp();
  }
  return guard;
}

InputSignature signature_of(const TensorList& inputs, const std::string& graph) {
  InputSignature signature;
  signature.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) fail("graph", graph, ": input ", i, " is an undefined tensor");
    signature.push_back(guard_of(inputs[i]));
  }
  return signature;
}

std::vector<TensorMeta> metas_of(const InputSignature& signature) {
  std::vector<TensorMeta> metas;
  metas.reserve(signature.size());
  for (const auto& guard : signature) metas.push_back(guard.meta);
  return metas;
}

std::string meta_str(const TensorMeta& meta) {
  return "size=" + shape_str(meta.shape) + ", dtype=flow." + dtype_name(meta.dtype) + ", device=" + meta.device.str();
}

std::string guard_str(const InputGuard& guard) {
  std::string out = meta_str(guard.meta);
  if (guard.placement) out += ", placement=" + guard.placement->str() + ", sbp=" + nd_sbp_str(guard.sbp);
  return out;
}

std::string signature_str(const InputSignature& signature) {
  std::string out = "(";
  for (size_t i = 0; i < signature.size(); ++i) out += (i ? "; input " : "input ") + std::to_string(i) + ": " + guard_str(signature[i]);
  return out + ")";
}

std::string signature_change(const InputSignature& seen, const InputSignature& now) {
  if (seen.size() != now.size()) return "number of inputs " + std::to_string(seen.size()) + " -> " + std::to_string(now.size());
  for (size_t i = 0; i < seen.size(); ++i) {
    const InputGuard& a = seen[i];
    const InputGuard& b = now[i];
    const std::string input = "input " + std::to_string(i) + " ";
    if (!(a.meta.shape == b.meta.shape)) return input + "size " + shape_str(a.meta.shape) + " -> " + shape_str(b.meta.shape);
    if (a.meta.dtype != b.meta.dtype) return input + "dtype flow." + dtype_name(a.meta.dtype) + " -> flow." + dtype_name(b.meta.dtype);
    if (!(a.meta.device == b.meta.device)) return input + "device " + a.meta.device.str() + " -> " + b.meta.device.str();
    if (a.placement != b.placement) return input + "placement " + placement_str(a.placement) + " -> " + placement_str(b.placement);
    if (a.sbp != b.sbp) return input + "sbp " + nd_sbp_str(a.sbp) + " -> " + nd_sbp_str(b.sbp);
  }
  return "";
}

}  // namespace flow::graph
