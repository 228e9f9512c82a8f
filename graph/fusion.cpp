// Element-wise fusion: chains of element-wise nodes of one output shape (bias adds, activations,
// optimizer update arithmetic, normalisation arithmetic, their gradients) become one
// fused_elementwise node each; a chain reading a linear's result that nothing else reads takes
// the linear in as a matmul epilogue (fused_linear).
#include <glog/logging.h>

#include <algorithm>
#include <set>

#include "core/ops/fused.h"
#include "graph/passes.h"

namespace flow::graph {
namespace {

struct Group {
  std::vector<int> members;  // Job positions, ascending
  std::set<std::string> values;
  proto::TensorDesc desc;  // of every member's output
  bool open = true;
};

// Whether every reader of `value` is a member of the group.
bool only_group_reads(const JobIndex& index, const Group& group, const std::string& value) {
  const auto& consumers = index.consumers(value);
  return std::all_of(consumers.begin(), consumers.end(),
                     [&](int consumer) { return std::binary_search(group.members.begin(), group.members.end(), consumer); });
}

bool same_layout(const proto::TensorDesc& a, const proto::TensorDesc& b) {
  return std::equal(a.shape().begin(), a.shape().end(), b.shape().begin(), b.shape().end()) && a.dtype() == b.dtype() &&
         a.device() == b.device();
}

// Whether op has a kernel for values of `meta`. Meta tensors run no kernel; their plans are the
// CPU's, so that a plan compiled on meta tensors measures what the CPU would run.
bool has_kernel(const char* op, const TensorMeta& meta) {
  const DeviceType device = meta.device.is_meta() ? DeviceType::kCPU : meta.device.type;
  return find_op(op).kernels.count({device, meta.dtype}) != 0;
}

// Whether a copy node only widens a float16/bfloat16 value to float32 on its device.
bool widening_copy(const proto::Node& node, const JobIndex& index) {
  if (node.op() != "copy" || node.inputs_size() != 1) return false;
  const auto [producer, output] = parse_value_name(node.inputs(0));
  const TensorMeta in = meta_of(index.node(producer).outputs(output)), out = meta_of(node.outputs(0));
  return is_reduced_floating(in.dtype) && out.dtype == kFloat32 && in.device == out.device && in.shape == out.shape;
}

// Whether the node can join a fused group: a fusable op with one output whose inputs broadcast
// onto it in a way the fused kernel reads, on a device and dtype the kernel supports. Copies join
// no group: a group absorbs the widening copies it reads (absorbable_copies).
bool fusable(const proto::Node& node, const JobIndex& index, const std::set<std::string>& written) {
  if (is_source_kind(node.op()) || node.op() == kOutputOp || node.op() == "copy" || !fused::can_fuse(node.op()) || node.outputs_size() != 1) {
    return false;
  }
  if (written.count(value_name(node.name(), 0))) return false;
  const TensorMeta out = meta_of(node.outputs(0));
  if (!has_kernel("fused_elementwise", out)) return false;
  for (int i = 0; i < node.inputs_size(); ++i) {
    const auto [producer, output] = parse_value_name(node.inputs(i));
    const TensorMeta in = meta_of(index.node(producer).outputs(output));
    // where's condition is the one bool operand the kernel reads (as 0 or 1).
    const bool condition = node.op() == "where" && i == 0 && in.dtype == kBool;
    if ((in.dtype != out.dtype && !condition) || !fused::operand_layout(in.shape, out.shape)) return false;
  }
  return true;
}

// The fused node replacing a group, and the renaming of the member values others read. With an
// `assign` (the only reader of the group's one exported value), the node writes that value into
// the assign's destination in place and replaces the assign too. With a `linear` (read only by
// the group), the node computes it first and the program reads its result as operand 0.
proto::Node fuse(const proto::Job& job, const JobIndex& index, const Group& group, const proto::Node* assign, const proto::Node* linear,
                 const std::map<std::string, const proto::Node*>& copies, std::map<std::string, std::string>& renamed) {
  const proto::Node& last = assign ? *assign : job.nodes(group.members.back());
  proto::Node fused_node;
  fused_node.set_name(last.name() + ".fused");
  fused_node.set_op(assign ? "fused_elementwise_inplace" : linear ? "fused_linear" : "fused_elementwise");
  fused_node.set_scope(last.scope());
  fused_node.set_location(last.location());
  if (assign) fused_node.add_inputs(assign->inputs(0));
  fused::Program program;
  std::map<std::string, int> operand_of, step_of;
  if (linear) {
    for (const auto& input : linear->inputs()) fused_node.add_inputs(input);
    operand_of[value_name(linear->name(), 0)] = 0;
  }
  // Inputs before the first operand that is an input of the node (operand 0 of a fused_linear is
  // its own result).
  const int leading = fused_node.inputs_size() - (linear ? 1 : 0);
  for (int position : group.members) {
    const proto::Node& node = job.nodes(position);
    fused::Step step{node.op(), {}, attrs_of(node)};
    auto operand_index = [&](const std::string& input) {
      auto [operand, added] = operand_of.emplace(input, fused_node.inputs_size() - leading);
      if (added) fused_node.add_inputs(input);
      return operand->second;
    };
    for (const auto& input : node.inputs()) {
      auto copy = copies.find(input);
      if (copy != copies.end() && !step_of.count(input)) {
        // The absorbed copy becomes a step reading its 16-bit input (its dtype and device are the
        // program's), placed before its first reader.
        step_of[input] = static_cast<int>(program.steps.size());
        program.steps.push_back({"copy", {operand_index(copy->second->inputs(0))}, Attrs()});
      }
      auto internal = step_of.find(input);
      step.args.push_back(internal != step_of.end() ? fused::step_arg(internal->second) : operand_index(input));
    }
    const std::string value = value_name(node.name(), 0);
    step_of[value] = static_cast<int>(program.steps.size());
    program.steps.push_back(std::move(step));
    if (!only_group_reads(index, group, value)) {
      renamed[assign ? value_name(assign->name(), 0) : value] = value_name(fused_node.name(), static_cast<int>(program.outputs.size()));
      program.outputs.push_back(step_of[value]);
      *fused_node.add_outputs() = assign ? assign->outputs(0) : node.outputs(0);
    }
  }
  // The first operand must have the program's dtype (kernels are found by the dtype of a node's
  // first input, and the program's dtype is its first operand's): a bool one (a where's
  // condition) or a 16-bit one (read through a copy) trades places with the first that has it.
  const auto other_dtype = [&](int input) {
    const auto [producer, output] = parse_value_name(fused_node.inputs(input));
    return meta_of(index.node(producer).outputs(output)).dtype != meta_of(group.desc).dtype;
  };
  if (!linear && other_dtype(leading)) {
    int floating = 1;
    while (leading + floating < fused_node.inputs_size() && other_dtype(leading + floating)) ++floating;
    CHECK(leading + floating < fused_node.inputs_size()) << "a fused group without an operand of its dtype";
    const std::string first = fused_node.inputs(leading);
    fused_node.set_inputs(leading, fused_node.inputs(leading + floating));
    fused_node.set_inputs(leading + floating, first);
    for (fused::Step& step : program.steps) {
      for (int& arg : step.args) arg = arg == 0 ? floating : arg == floating ? 0 : arg;
    }
  }
  Attrs attrs;
  attrs.set("program", fused::encode(program)).set("shape", meta_of(group.desc).shape);
  if (assign) attrs.set("destinations", int64_t{1});
  if (linear) attrs.set("linear_inputs", static_cast<int64_t>(linear->inputs_size()));
  set_attrs(fused_node, attrs);
  return fused_node;
}

// Whether a node between positions `from` and `to` (exclusive) writes one of `values` in place.
bool written_between(const proto::Job& job, int from, int to, const std::set<std::string>& values) {
  for (int p = from + 1; p < to; ++p) {
    const proto::Node& between = job.nodes(p);
    if (!has_side_effects(between) || between.op() == kOutputOp) continue;
    for (int i = 0; i < between.outputs_size() && i < between.inputs_size(); ++i) {
      if (values.count(between.inputs(i))) return true;
    }
  }
  return false;
}

// The linear whose result the group reads as a whole and nothing else reads, with no in-place
// write of its inputs before the group ends: the group can run as its epilogue.
const proto::Node* absorbable_linear(const proto::Job& job, const JobIndex& index, const Group& group) {
  for (int position : group.members) {
    for (const auto& input : job.nodes(position).inputs()) {
      if (group.values.count(input)) continue;
      const proto::Node& producer = index.node(parse_value_name(input).first);
      if (producer.op() != "linear" || producer.outputs_size() != 1 || !same_layout(producer.outputs(0), group.desc)) continue;
      const TensorMeta meta = meta_of(group.desc);
      if (!has_kernel("fused_linear", meta)) continue;
      const std::set<std::string> linear_inputs(producer.inputs().begin(), producer.inputs().end());
      if (only_group_reads(index, group, input) && !written_between(job, index.position(producer.name()), group.members.back(), linear_inputs)) return &producer;
    }
  }
  return nullptr;
}

// The node whose storage `value` is: an in-place op returns its written inputs' storage, so
// AdamW's decay (p.mul_) and then its update (p.sub_) both write the parameter variable.
const proto::Node& storage_owner(const JobIndex& index, std::string value) {
  for (;;) {
    const auto [name, output] = parse_value_name(value);
    const proto::Node& node = index.node(name);
    if (output >= written_inputs(node)) return node;
    value = node.inputs(output);
  }
}

// The assign that can absorb the group: the only reader of the group's only exported value,
// writing it whole into a contiguous variable (or a value an in-place write of it returned), with
// no write to the group's operands between the group and the assign.
const proto::Node* absorbable_assign(const proto::Job& job, const JobIndex& index, const Group& group, const PassContext& context) {
  const proto::Node* assign = nullptr;
  std::set<std::string> operands;
  for (int position : group.members) {
    const proto::Node& node = job.nodes(position);
    for (const auto& input : node.inputs()) {
      if (!group.values.count(input)) operands.insert(input);
    }
    for (int consumer : index.consumers(value_name(node.name(), 0))) {
      if (std::binary_search(group.members.begin(), group.members.end(), consumer)) continue;
      if (assign != nullptr || job.nodes(consumer).op() != "assign" || index.consumers(value_name(node.name(), 0)).size() != 1) return nullptr;
      assign = &job.nodes(consumer);
      if (assign->inputs(1) != value_name(node.name(), 0)) return nullptr;
    }
  }
  if (assign == nullptr) return nullptr;
  const proto::Node& destination = storage_owner(index, assign->inputs(0));
  const auto variable = context.fixed.find(destination.name());
  if (destination.op() != kVariableOp || variable == context.fixed.end() || !variable->second.is_contiguous() ||
      !same_layout(assign->outputs(0), group.desc)) {
    return nullptr;
  }
  return written_between(job, group.members.back(), index.position(assign->name()), operands) ? nullptr : assign;
}

// The widening copies (by output value) the group can read as conversions of their 16-bit inputs:
// copies only the group reads, with no in-place write of their input before the fused node runs
// (at `at`). An AMP step's gradients, cast to float32 for the optimizer, are then read in
// bfloat16 by the update itself, and the float32 copies are never written.
std::map<std::string, const proto::Node*> absorbable_copies(const proto::Job& job, const JobIndex& index, const Group& group, int at) {
  std::map<std::string, const proto::Node*> copies;
  for (int position : group.members) {
    for (const auto& input : job.nodes(position).inputs()) {
      const proto::Node& producer = index.node(parse_value_name(input).first);
      if (group.values.count(input) || copies.count(input) || !widening_copy(producer, index)) continue;
      if (only_group_reads(index, group, input) && !written_between(job, index.position(producer.name()), at, {producer.inputs(0)})) {
        copies[input] = &producer;
      }
    }
  }
  return copies;
}

// Whether a value the fused node reads has the group's dtype: its first operand must (a group
// reading only bool values and 16-bit ones through copies stays unfused).
bool reads_its_own_dtype(const proto::Job& job, const JobIndex& index, const Group& group,
                         const std::map<std::string, const proto::Node*>& copies) {
  const DType dtype = meta_of(group.desc).dtype;
  for (int position : group.members) {
    for (const auto& input : job.nodes(position).inputs()) {
      if (group.values.count(input) || copies.count(input)) continue;
      const auto [producer, output] = parse_value_name(input);
      if (meta_of(index.node(producer).outputs(output)).dtype == dtype) return true;
    }
  }
  return false;
}

}  // namespace

void elementwise_fusion(proto::Job& job, PassContext& context) {
  const JobIndex index(job);
  const std::set<std::string> written = written_in_place(job);
  std::vector<Group> groups;
  std::map<std::string, int> group_of_value;
  std::map<int, int> group_of_position;
  for (int p = 0; p < job.nodes_size(); ++p) {
    const proto::Node& node = job.nodes(p);
    int joined = -1;
    if (fusable(node, index, written)) {
      // Join (and merge) every open group of the same layout that produced an input.
      for (const auto& input : node.inputs()) {
        auto it = group_of_value.find(input);
        if (it == group_of_value.end() || it->second == joined) continue;
        Group& group = groups[it->second];
        if (!group.open || !same_layout(group.desc, node.outputs(0))) continue;
        if (joined < 0) {
          joined = it->second;
          continue;
        }
        Group& target = groups[joined];
        for (int member : group.members) group_of_position[member] = joined;
        for (const auto& value : group.values) group_of_value[value] = joined;
        target.members.insert(target.members.end(), group.members.begin(), group.members.end());
        target.values.insert(group.values.begin(), group.values.end());
        std::sort(target.members.begin(), target.members.end());
        group = Group{};
        group.open = false;
      }
      if (joined < 0) {
        joined = static_cast<int>(groups.size());
        groups.push_back(Group{{}, {}, node.outputs(0), true});
      }
      groups[joined].members.push_back(p);
      groups[joined].values.insert(value_name(node.name(), 0));
      group_of_value[value_name(node.name(), 0)] = joined;
      group_of_position[p] = joined;
    }
    // A group read by a node outside it cannot grow past that node (the fused node sits at its
    // last member), and an in-place write must not move before or after the group's reads.
    for (const auto& input : node.inputs()) {
      auto it = group_of_value.find(input);
      if (it != group_of_value.end() && it->second != joined) groups[it->second].open = false;
    }
    if (has_side_effects(node)) {
      for (auto& group : groups) group.open = false;
    }
  }

  std::map<std::string, std::string> renamed;
  std::map<int, proto::Node> replacement;  // at the group's last member, or at the assign it absorbs
  std::set<int> removed;
  for (const Group& group : groups) {
    if (group.members.empty()) continue;
    const proto::Node* assign = absorbable_assign(job, index, group, context);
    const proto::Node* linear = assign ? nullptr : absorbable_linear(job, index, group);
    const int at = assign ? index.position(assign->name()) : group.members.back();
    const std::map<std::string, const proto::Node*> copies = absorbable_copies(job, index, group, at);
    if (assign == nullptr && linear == nullptr && copies.empty() && group.members.size() < 2) continue;
    if (linear == nullptr && !reads_its_own_dtype(job, index, group, copies)) continue;
    replacement[at] = fuse(job, index, group, assign, linear, copies, renamed);
    FusedGroup& fused_group = context.record.fused.emplace_back();
    fused_group.node = {replacement[at].name(), replacement[at].op()};
    if (linear) fused_group.members.push_back({linear->name(), linear->op()});
    for (const auto& [value, copy] : copies) fused_group.members.push_back({copy->name(), copy->op()});
    for (int member : group.members) fused_group.members.push_back({job.nodes(member).name(), job.nodes(member).op()});
    if (assign) fused_group.members.push_back({assign->name(), assign->op()});
    removed.insert(group.members.begin(), group.members.end());
    for (const auto& [value, copy] : copies) removed.insert(index.position(copy->name()));
    if (linear) removed.insert(index.position(linear->name()));
    removed.erase(at);
  }
  if (replacement.empty()) return;
  proto::Job rewritten;
  for (int p = 0; p < job.nodes_size(); ++p) {
    if (removed.count(p)) continue;
    proto::Node* node = rewritten.add_nodes();
    auto fused_node = replacement.find(p);
    if (fused_node != replacement.end()) node->Swap(&fused_node->second);
    else node->Swap(job.mutable_nodes(p));
    for (auto& input : *node->mutable_inputs()) {
      auto it = renamed.find(input);
      if (it != renamed.end()) input = it->second;
    }
  }
  job.mutable_nodes()->Swap(rewritten.mutable_nodes());
}

}  // namespace flow::graph
