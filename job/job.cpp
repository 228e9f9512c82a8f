#include "job/job.h"

#include <glog/logging.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <sstream>

#include "core/ops/comm.h"

namespace flow::graph {

bool is_source_kind(const std::string& op) {
  return op == kInputOp || op == kVariableOp || op == kConstantOp || op == kFeedOp;
}

std::string value_name(const std::string& node, int index) { return node + ":" + std::to_string(index); }

std::pair<std::string, int> parse_value_name(const std::string& value) {
  const size_t colon = value.rfind(':');
  CHECK_NE(colon, std::string::npos) << "malformed value name " << value;
  return {value.substr(0, colon), std::stoi(value.substr(colon + 1))};
}

proto::AttrValue attr_to_proto(const AttrValue& value) {
  proto::AttrValue out;
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) out.set_b(v);
        else if constexpr (std::is_same_v<T, int64_t>) out.set_i(v);
        else if constexpr (std::is_same_v<T, double>) out.set_f(v);
        else if constexpr (std::is_same_v<T, std::string>) out.set_s(v);
        else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          auto* ints = out.mutable_ints();  // set even when empty
          for (int64_t x : v) ints->add_values(x);
        } else if constexpr (std::is_same_v<T, DType>) out.set_dtype(dtype_name(v));
        else if constexpr (std::is_same_v<T, Device>) out.set_device(v.str());
        else {
          static_assert(std::is_same_v<T, Scalar>);
          if (v.is_floating()) out.mutable_scalar()->set_f(v.to_double());
          else if (v.is_bool()) out.mutable_scalar()->set_b(v.to_int() != 0);
          else out.mutable_scalar()->set_i(v.to_int());
        }
      },
      value);
  return out;
}

AttrValue attr_from_proto(const proto::AttrValue& value) {
  switch (value.value_case()) {
    case proto::AttrValue::kB: return value.b();
    case proto::AttrValue::kI: return value.i();
    case proto::AttrValue::kF: return value.f();
    case proto::AttrValue::kS: return value.s();
    case proto::AttrValue::kInts: return std::vector<int64_t>(value.ints().values().begin(), value.ints().values().end());
    case proto::AttrValue::kDtype: return dtype_from_name(value.dtype());
    case proto::AttrValue::kDevice: return Device(value.device());
    case proto::AttrValue::kScalar: {
      const auto& s = value.scalar();
      if (s.value_case() == proto::ScalarValue::kF) return Scalar(s.f());
      if (s.value_case() == proto::ScalarValue::kB) return Scalar(s.b());
      return Scalar(s.i());
    }
    case proto::AttrValue::VALUE_NOT_SET: break;
  }
  fail("job", "attribute without a value");
}

Attrs attrs_of(const proto::Node& node) {
  Attrs attrs;
  for (const auto& [name, value] : node.attrs()) attrs.set(name, attr_from_proto(value));
  return attrs;
}

void set_attrs(proto::Node& node, const Attrs& attrs) {
  for (const auto& [name, value] : attrs.values()) (*node.mutable_attrs())[name] = attr_to_proto(value);
}

proto::TensorDesc describe(const TensorMeta& meta) {
  proto::TensorDesc desc;
  for (int64_t d : meta.shape) desc.add_shape(d);
  desc.set_dtype(dtype_name(meta.dtype));
  desc.set_device(meta.device.str());
  desc.set_placement(meta.device.str());
  desc.set_sbp(Sbp::broadcast().str());
  return desc;
}

TensorMeta meta_of(const proto::TensorDesc& desc) {
  return {Shape(std::vector<int64_t>(desc.shape().begin(), desc.shape().end())), dtype_from_name(desc.dtype()), Device(desc.device())};
}

std::string describe_str(const proto::TensorDesc& desc) {
  std::ostringstream out;
  out << "(";
  for (int d = 0; d < desc.shape_size(); ++d) out << (d ? ", " : "") << desc.shape(d);
  out << (desc.shape_size() == 1 ? ",)" : ")") << ", " << desc.dtype() << ", " << desc.device() << ", " << desc.sbp();
  // A global value's piece: the logical tensor's placement.
  if (desc.placement() != desc.device()) out << ", placement=" << desc.placement();
  return out.str();
}

void rename_inputs(proto::Job& job, const std::map<std::string, std::string>& renamed) {
  for (auto& node : *job.mutable_nodes()) {
    for (auto& input : *node.mutable_inputs()) {
      auto found = renamed.find(input);
      if (found != renamed.end()) input = found->second;
    }
  }
}

std::string job_to_text(const proto::Job& job) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(job, &text);
  return text;
}

JobIndex::JobIndex(const proto::Job& job) : job_(job) {
  for (int i = 0; i < job.nodes_size(); ++i) {
    positions_[job.nodes(i).name()] = i;
    for (const auto& input : job.nodes(i).inputs()) consumers_[input].push_back(i);
  }
}

int JobIndex::position(const std::string& node) const {
  auto it = positions_.find(node);
  CHECK(it != positions_.end()) << "no node " << node;
  return it->second;
}

const proto::Node& JobIndex::node(const std::string& name) const { return job_.nodes(position(name)); }

const std::vector<int>& JobIndex::consumers(const std::string& value) const {
  static const std::vector<int> kNone;
  auto it = consumers_.find(value);
  return it == consumers_.end() ? kNone : it->second;
}

bool has_side_effects(const proto::Node& node) {
  if (node.op() == kOutputOp) return true;
  if (is_source_kind(node.op())) return false;
  // Other ranks wait for every collective, even one whose result this rank does not read (the
  // source of a move to another placement).
  const OpDef& op = find_op(node.op());
  return op.inplace || distributed::is_collective(op);
}

int written_inputs(const proto::Node& node) {
  if (is_source_kind(node.op()) || node.op() == kOutputOp || !find_op(node.op()).inplace) return 0;
  return std::min(node.outputs_size(), node.inputs_size());
}

std::set<std::string> written_in_place(const proto::Job& job) {
  std::set<std::string> written;
  for (const auto& node : job.nodes()) {
    for (int i = 0; i < written_inputs(node); ++i) written.insert(node.inputs(i));
  }
  return written;
}

}  // namespace flow::graph
