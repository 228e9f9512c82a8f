// Update-with-cast (OneFlow's FuseUpdateCastOpsPass): under AMP the forward casts each float32
// parameter to bfloat16 (float16) on every step, reading the whole parameter again after the
// optimizer's update wrote it. Here the fused update also writes the rounded copy, which becomes
// a variable of its own that the cast's readers read; the cast disappears.
#include <algorithm>

#include "core/ops/copy.h"
#include "core/ops/fused.h"
#include "graph/passes.h"

namespace flow::graph {
namespace {

// Whether the node only narrows a float32 value to float16/bfloat16 on its device.
bool narrowing_copy(const proto::Node& node, const proto::TensorDesc& source) {
  if (node.op() != "copy" || node.inputs_size() != 1) return false;
  const TensorMeta in = meta_of(source), out = meta_of(node.outputs(0));
  return in.dtype == kFloat32 && is_reduced_floating(out.dtype) && in.device == out.device && in.shape == out.shape;
}

// One in-place write of a variable's storage: the node's position, and whether it writes the whole
// variable through input 0 (rather than through a view or another input).
struct StorageWrite {
  int position;
  bool whole_through_input0;
};

// Every in-place write of each variable's storage, in Job order. An in-place op's output i aliases
// its input i, and a view aliases its input, so a write of a value returned by an earlier write
// (AdamW's decay, then its Adam update) or of a view of the variable is a write of the variable.
std::map<std::string, std::vector<StorageWrite>> variable_writes(const proto::Job& job) {
  struct Alias {
    std::string variable;
    bool through_view;
  };
  std::map<std::string, Alias> aliases;  // value -> the variable whose storage it is
  std::map<std::string, std::vector<StorageWrite>> writes;
  for (int p = 0; p < job.nodes_size(); ++p) {
    const proto::Node& node = job.nodes(p);
    if (node.op() == kVariableOp) aliases[value_name(node.name(), 0)] = {node.name(), false};
    if (is_source_kind(node.op()) || node.op() == kOutputOp) continue;
    const int written = written_inputs(node);
    for (int i = 0; i < written; ++i) {
      const auto alias = aliases.find(node.inputs(i));
      if (alias == aliases.end()) continue;
      const Alias of = alias->second;
      writes[of.variable].push_back({p, i == 0 && !of.through_view});
      aliases[value_name(node.name(), i)] = of;
    }
    const OpDef& op = find_op(node.op());
    if (written == 0 && op.view && node.inputs_size() > 0) {
      const auto alias = aliases.find(node.inputs(0));
      if (alias != aliases.end()) aliases[value_name(node.name(), 0)] = {alias->second.variable, true};
    }
  }
  return writes;
}

}  // namespace

void fuse_update_cast(proto::Job& job, PassContext& context) {
  const JobIndex index(job);
  const std::map<std::string, std::vector<StorageWrite>> writes = variable_writes(job);
  std::map<std::string, std::string> renamed;
  std::set<int> removed;
  std::map<int, proto::Node> copies_after;  // the new variable, by its parameter's position
  std::set<std::string> names;
  for (const auto& node : job.nodes()) names.insert(node.name());
  for (int p = 0; p < job.nodes_size(); ++p) {
    const proto::Node& variable = job.nodes(p);
    if (variable.op() != kVariableOp) continue;
    const auto written = writes.find(variable.name());
    const auto tensor = context.fixed.find(variable.name());
    if (written == writes.end() || tensor == context.fixed.end() || tensor->second.is_global() || !tensor->second.is_contiguous()) {
      continue;
    }
    // The rounded copy must hold the parameter's value after its last write of the step, so that
    // last write must be a fused update writing it whole (and nothing else), and every write must
    // be seen whole: a write through a view would change the parameter after its copy is made.
    const std::vector<StorageWrite>& storage_writes = written->second;
    if (std::any_of(storage_writes.begin(), storage_writes.end(), [](const StorageWrite& w) { return !w.whole_through_input0; })) {
      continue;
    }
    const int first = storage_writes.front().position, at = storage_writes.back().position;
    proto::Node& update = *job.mutable_nodes(at);
    const std::string value = value_name(variable.name(), 0);
    if (update.op() != "fused_elementwise_inplace" || update.attrs().at("destinations").i() != 1) continue;
    // Its casts of one 16-bit dtype, every reader of which runs before the first write (and is not
    // a graph output: those stay fresh tensors).
    std::vector<int> casts;
    for (int consumer : index.consumers(value)) {
      const proto::Node& cast = job.nodes(consumer);
      if (!narrowing_copy(cast, variable.outputs(0)) || consumer > first) continue;
      if (!casts.empty() && cast.outputs(0).dtype() != job.nodes(casts[0]).outputs(0).dtype()) continue;
      const auto& readers = index.consumers(value_name(cast.name(), 0));
      if (std::all_of(readers.begin(), readers.end(), [&](int r) { return r < first && job.nodes(r).op() != kOutputOp; })) casts.push_back(consumer);
    }
    if (casts.empty()) continue;
    const proto::Node& first_cast = job.nodes(casts[0]);
    const std::string dtype = first_cast.outputs(0).dtype();
    proto::Node copy;
    copy.set_name(variable.name() + "." + dtype);
    if (names.count(copy.name())) continue;
    copy.set_op(kVariableOp);
    (*copy.mutable_attrs())["key"].set_s(copy.name());
    (*copy.mutable_attrs())["cast_of"].set_s(variable.name());
    *copy.add_outputs() = first_cast.outputs(0);
    const TensorMeta meta = meta_of(first_cast.outputs(0));
    Tensor rounded = make_tensor(meta.shape, meta.dtype, meta.device);
    detail::copy_into(rounded, tensor->second);
    context.fixed[copy.name()] = rounded;

    fused::Program program = fused::decode(update.attrs().at("program").s());
    program.steps.push_back({"copy", {fused::step_arg(program.outputs.at(0))}, Attrs().set("dtype", dtype)});
    program.outputs.push_back(static_cast<int>(program.steps.size()) - 1);
    Attrs attrs = attrs_of(update);
    attrs.set("program", fused::encode(program)).set("destinations", int64_t{2});
    set_attrs(update, attrs);
    update.mutable_inputs()->Add();
    for (int i = update.inputs_size() - 1; i > 1; --i) update.set_inputs(i, update.inputs(i - 1));
    update.set_inputs(1, value_name(copy.name(), 0));
    *update.add_outputs() = copy.outputs(0);
    for (int cast : casts) {
      renamed[value_name(job.nodes(cast).name(), 0)] = value_name(copy.name(), 0);
      removed.insert(cast);
      context.record.bypassed.push_back({{job.nodes(cast).name(), job.nodes(cast).op()}, "rounded by " + update.name() + " into " + copy.name()});
    }
    copies_after[p] = std::move(copy);
  }
  if (copies_after.empty()) return;
  proto::Job rewritten;
  for (int p = 0; p < job.nodes_size(); ++p) {
    if (removed.count(p)) continue;
    rewritten.add_nodes()->Swap(job.mutable_nodes(p));
    auto copy = copies_after.find(p);
    if (copy != copies_after.end()) rewritten.add_nodes()->Swap(&copy->second);
  }
  job.mutable_nodes()->Swap(rewritten.mutable_nodes());
  rename_inputs(job, renamed);
}

}  // namespace flow::graph
