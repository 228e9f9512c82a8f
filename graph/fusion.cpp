// Element-wise fusion: chains of element-wise nodes of one output shape (bias adds, activations,
// optimizer update arithmetic, normalisation arithmetic, their gradients) become one
// fused_elementwise node each.
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

bool same_layout(const proto::TensorDesc& a, const proto::TensorDesc& b) {
  return std::equal(a.shape().begin(), a.shape().end(), b.shape().begin(), b.shape().end()) && a.dtype() == b.dtype() &&
         a.device() == b.device();
}

// Whether the node can join a fused group: a fusable op with one output whose inputs broadcast
// onto it in a way the fused kernel reads, on a device and dtype the kernel supports.
bool fusable(const proto::Node& node, const JobIndex& index, const std::set<std::string>& written) {
  if (is_source_kind(node.op()) || node.op() == kOutputOp || !fused::can_fuse(node.op()) || node.outputs_size() != 1) return false;
  if (written.count(value_name(node.name(), 0))) return false;
  const TensorMeta out = meta_of(node.outputs(0));
  if (find_op("fused_elementwise").kernels.count({out.device.type, out.dtype}) == 0) return false;
  for (const auto& input : node.inputs()) {
    const auto [producer, output] = parse_value_name(input);
    const TensorMeta in = meta_of(index.node(producer).outputs(output));
    if (in.dtype != out.dtype || !fused::operand_layout(in.shape, out.shape)) return false;
  }
  return true;
}

// The fused node replacing a group, and the renaming of the member values others read. With an
// `assign` (the only reader of the group's one exported value), the node writes that value into
// the assign's destination in place and replaces the assign too.
proto::Node fuse(const proto::Job& job, const JobIndex& index, const Group& group, const proto::Node* assign,
                 std::map<std::string, std::string>& renamed) {
  const proto::Node& last = assign ? *assign : job.nodes(group.members.back());
  proto::Node fused_node;
  fused_node.set_name(last.name() + ".fused");
  fused_node.set_op(assign ? "fused_elementwise_inplace" : "fused_elementwise");
  fused_node.set_scope(last.scope());
  fused_node.set_location(last.location());
  if (assign) fused_node.add_inputs(assign->inputs(0));
  fused::Program program;
  std::map<std::string, int> operand_of, step_of;
  for (int position : group.members) {
    const proto::Node& node = job.nodes(position);
    fused::Step step{node.op(), {}, attrs_of(node)};
    for (const auto& input : node.inputs()) {
      auto internal = step_of.find(input);
      if (internal != step_of.end()) {
        step.args.push_back(fused::step_arg(internal->second));
        continue;
      }
      const int first_operand = assign ? 1 : 0;
      auto [operand, added] = operand_of.emplace(input, fused_node.inputs_size() - first_operand);
      if (added) fused_node.add_inputs(input);
      step.args.push_back(operand->second);
    }
    const std::string value = value_name(node.name(), 0);
    step_of[value] = static_cast<int>(program.steps.size());
    program.steps.push_back(std::move(step));
    bool read_outside = false;
    for (int consumer : index.consumers(value)) {
      read_outside = read_outside || !std::binary_search(group.members.begin(), group.members.end(), consumer);
    }
    if (read_outside) {
      renamed[assign ? value_name(assign->name(), 0) : value] = value_name(fused_node.name(), static_cast<int>(program.outputs.size()));
      program.outputs.push_back(step_of[value]);
      *fused_node.add_outputs() = assign ? assign->outputs(0) : node.outputs(0);
    }
  }
  Attrs attrs;
  attrs.set("program", fused::encode(program)).set("shape", meta_of(group.desc).shape);
  if (assign) attrs.set("destinations", int64_t{1});
  set_attrs(fused_node, attrs);
  return fused_node;
}

// The assign that can absorb the group: the only reader of the group's only exported value,
// writing it whole into a contiguous variable, with no write to the group's operands between
// the group and the assign.
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
  const std::string destination = parse_value_name(assign->inputs(0)).first;
  const auto variable = context.fixed.find(destination);
  if (index.node(destination).op() != kVariableOp || variable == context.fixed.end() || !variable->second.is_contiguous() ||
      !same_layout(assign->outputs(0), group.desc)) {
    return nullptr;
  }
  for (int p = group.members.back() + 1; p < index.position(assign->name()); ++p) {
    const proto::Node& between = job.nodes(p);
    if (!has_side_effects(between) || between.op() == kOutputOp) continue;
    for (int i = 0; i < between.outputs_size(); ++i) {
      if (operands.count(between.inputs(i))) return nullptr;
    }
  }
  return assign;
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
    if (assign == nullptr && group.members.size() < 2) continue;
    const int at = assign ? index.position(assign->name()) : group.members.back();
    replacement[at] = fuse(job, index, group, assign, renamed);
    removed.insert(group.members.begin(), group.members.end());
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
