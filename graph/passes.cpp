// The pass manager and the generic Job passes: constant folding, common-subexpression
// elimination and dead-code elimination.
#include "graph/passes.h"

#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>

#include "core/interpreter.h"
#include "core/ops/comm.h"

namespace flow::graph {
namespace {

// Whether a pass may merge or fold the node: a pure op whose results nobody overwrites. Collectives
// are left alone: every rank runs each of them, in Job order.
bool is_pure(const proto::Node& node, const std::set<std::string>& written) {
  if (is_source_kind(node.op()) || node.op() == kOutputOp) return false;
  const OpDef& op = find_op(node.op());
  if (op.random || op.inplace || distributed::is_collective(op) || node.op() == "empty") return false;
  for (int j = 0; j < node.outputs_size(); ++j) {
    if (written.count(value_name(node.name(), j))) return false;
  }
  return true;
}

std::string cse_key(const proto::Node& node) {
  std::string key = node.op();
  for (const auto& input : node.inputs()) key += "|" + input;
  const std::map<std::string, proto::AttrValue> sorted(node.attrs().begin(), node.attrs().end());
  for (const auto& [name, value] : sorted) key += "|" + name + "=" + value.SerializeAsString();
  return key;
}

void remove_nodes(proto::Job& job, const std::set<int>& positions) {
  if (positions.empty()) return;
  proto::Job kept;
  kept.mutable_nodes()->Reserve(job.nodes_size() - static_cast<int>(positions.size()));
  for (int i = 0; i < job.nodes_size(); ++i) {
    if (!positions.count(i)) kept.add_nodes()->Swap(job.mutable_nodes(i));
  }
  job.mutable_nodes()->Swap(kept.mutable_nodes());
}

std::vector<std::string> node_names(const proto::Job& job) {
  std::vector<std::string> names;
  names.reserve(static_cast<size_t>(job.nodes_size()));
  for (const auto& node : job.nodes()) names.push_back(node.name());
  return names;
}

// The names of `names` missing from `others`, in order.
std::vector<std::string> missing_from(const std::vector<std::string>& names, const std::vector<std::string>& others) {
  const std::set<std::string> present(others.begin(), others.end());
  std::vector<std::string> missing;
  for (const auto& name : names) {
    if (!present.count(name)) missing.push_back(name);
  }
  return missing;
}

}  // namespace

PassManager& PassManager::add(std::string name, PassFn pass) {
  passes_.emplace_back(std::move(name), std::move(pass));
  return *this;
}

PassManager& PassManager::add(const PassManager& others) {
  passes_.insert(passes_.end(), others.passes_.begin(), others.passes_.end());
  return *this;
}

PassManager& PassManager::insert_before(const std::string& before, std::string name, PassFn pass) {
  auto it = std::find_if(passes_.begin(), passes_.end(), [&](const auto& entry) { return entry.first == before; });
  CHECK(it != passes_.end()) << "no pass named " << before;
  passes_.emplace(it, std::move(name), std::move(pass));
  return *this;
}

std::vector<std::string> PassManager::names() const {
  std::vector<std::string> names;
  for (const auto& [name, pass] : passes_) names.push_back(name);
  return names;
}

std::vector<PassRecord> PassManager::run(proto::Job& job, PassContext& context, int debug_level, std::ostream* log) const {
  const char* dump_dir = std::getenv("FLOW_GRAPH_DUMP_DIR");
  auto dump = [&](size_t step, const std::string& stage) {
    if (dump_dir != nullptr && *dump_dir != '\0') {
      std::ofstream(std::string(dump_dir) + "/" + job.name() + "_" + std::to_string(step) + "_" + stage + ".prototxt") << job_to_text(job);
    }
    if (debug_level >= 3 && log != nullptr) *log << "(GRAPH:" << job.name() << ") job after " << stage << ":\n" << job_to_text(job);
  };
  dump(0, "traced");
  std::vector<PassRecord> records;
  for (size_t i = 0; i < passes_.size(); ++i) {
    const std::vector<std::string> before = node_names(job);
    context.record = PassRecord{};
    const auto start = std::chrono::steady_clock::now();
    passes_[i].second(job, context);
    PassRecord& record = context.record;
    record.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    record.pass = passes_[i].first;
    const std::vector<std::string> after = node_names(job);
    record.nodes_before = static_cast<int64_t>(before.size());
    record.nodes_after = static_cast<int64_t>(after.size());
    record.removed = missing_from(before, after);
    record.added = missing_from(after, before);
    if (debug_level >= 1 && log != nullptr) {
      *log << "(GRAPH:" << job.name() << ") pass " << record.pass << ": " << record.nodes_before << " -> " << record.nodes_after << " nodes\n";
    }
    dump(i + 1, record.pass);
    records.push_back(std::move(record));
  }
  return records;
}

PassManager default_passes() {
  PassManager passes;
  passes.add("conv_batch_norm_folding", conv_batch_norm_folding)
      .add("constant_folding", constant_folding)
      .add("common_subexpression_elimination", common_subexpression_elimination)
      .add("copy_elimination", copy_elimination)
      .add("dead_code_elimination", dead_code_elimination)
      .add("unused_pool_indices_elimination", unused_pool_indices_elimination)
      .add("elementwise_fusion", elementwise_fusion);
  return passes;
}

void dead_code_elimination(proto::Job& job, PassContext& context) {
  std::set<std::string> needed;
  std::set<int> dead;
  for (int i = job.nodes_size() - 1; i >= 0; --i) {
    const proto::Node& node = job.nodes(i);
    bool live = node.op() == kInputOp || has_side_effects(node);
    for (int j = 0; j < node.outputs_size() && !live; ++j) live = needed.count(value_name(node.name(), j)) != 0;
    if (!live) {
      dead.insert(i);
      if (node.op() == kConstantOp) context.fixed.erase(node.name());
      continue;
    }
    for (const auto& input : node.inputs()) needed.insert(input);
  }
  for (int position : dead) context.record.eliminated.push_back({{job.nodes(position).name(), job.nodes(position).op()}, "dead"});
  remove_nodes(job, dead);
}

void unused_pool_indices_elimination(proto::Job& job, PassContext& context) {
  const JobIndex index(job);
  for (int i = 0; i < job.nodes_size(); ++i) {
    proto::Node& node = *job.mutable_nodes(i);
    if (node.op() != "max_pool2d" || !index.consumers(value_name(node.name(), 1)).empty()) continue;
    node.set_op("max_pool2d_inference");
    node.mutable_outputs()->RemoveLast();
    context.record.rewritten.push_back({node.name(), node.op()});
  }
}

void common_subexpression_elimination(proto::Job& job, PassContext& context) {
  const std::set<std::string> written = written_in_place(job);
  std::map<std::string, std::string> first_by_key;
  std::map<std::string, std::string> renamed;
  std::set<int> merged;
  for (int i = 0; i < job.nodes_size(); ++i) {
    proto::Node& node = *job.mutable_nodes(i);
    for (auto& input : *node.mutable_inputs()) {
      auto it = renamed.find(input);
      if (it != renamed.end()) input = it->second;
    }
    if (!is_pure(node, written)) continue;
    const auto [first, inserted] = first_by_key.emplace(cse_key(node), node.name());
    if (inserted) continue;
    for (int j = 0; j < node.outputs_size(); ++j) renamed[value_name(node.name(), j)] = value_name(first->second, j);
    merged.insert(i);
    context.record.eliminated.push_back({{node.name(), node.op()}, "duplicate of " + first->second});
  }
  remove_nodes(job, merged);
}

void constant_folding(proto::Job& job, PassContext& context) {
  const std::set<std::string> written = written_in_place(job);
  const JobIndex index(job);
  std::set<std::string> constants;
  for (const auto& node : job.nodes()) {
    if (node.op() == kConstantOp) constants.insert(node.name());
  }
  for (auto& node : *job.mutable_nodes()) {
    if (node.outputs_size() != 1 || !is_pure(node, written)) continue;
    bool foldable = true;
    for (const auto& input : node.inputs()) foldable = foldable && constants.count(parse_value_name(input).first) != 0;
    // Graph outputs stay fresh tensors on every call rather than one shared constant.
    for (int consumer : index.consumers(value_name(node.name(), 0))) foldable = foldable && job.nodes(consumer).op() != kOutputOp;
    if (!foldable) continue;
    TensorList inputs;
    for (const auto& input : node.inputs()) inputs.push_back(context.fixed.at(parse_value_name(input).first));
    const TensorList values = execute_op(find_op(node.op()), inputs, attrs_of(node), {meta_of(node.outputs(0))});
    context.fixed[node.name()] = values.at(0);
    constants.insert(node.name());
    context.record.folded.push_back({node.name(), node.op()});
    node.set_op(kConstantOp);
    node.clear_inputs();
    node.clear_input_sbp();
    node.clear_attrs();
    (*node.mutable_attrs())["key"].set_s(node.name());
  }
}

void copy_elimination(proto::Job& job, PassContext& context) {
  const std::set<std::string> written = written_in_place(job);
  const JobIndex index(job);
  std::map<std::string, std::string> renamed;
  for (const auto& node : job.nodes()) {
    if (node.op() != "copy" || node.inputs_size() != 1) continue;
    const std::string& source = node.inputs(0);
    const auto [producer, output] = parse_value_name(source);
    const proto::TensorDesc& from = index.node(producer).outputs(output);
    const proto::TensorDesc& to = node.outputs(0);
    const std::string value = value_name(node.name(), 0);
    if (from.dtype() != to.dtype() || from.device() != to.device() || written.count(source) || written.count(value)) continue;
    // A view's output may be strided (permuted, sliced, expanded): the copy makes it contiguous.
    if (!is_source_kind(index.node(producer).op()) && find_op(index.node(producer).op()).view) continue;
    bool feeds_output = false;
    for (int consumer : index.consumers(value)) feeds_output = feeds_output || job.nodes(consumer).op() == kOutputOp;
    if (feeds_output) continue;  // a graph output stays a tensor of its own
    auto chained = renamed.find(source);
    renamed[value] = chained == renamed.end() ? source : chained->second;
    context.record.bypassed.push_back({{node.name(), node.op()}, "copy of " + renamed[value]});
  }
  for (auto& node : *job.mutable_nodes()) {
    for (auto& input : *node.mutable_inputs()) {
      auto it = renamed.find(input);
      if (it != renamed.end()) input = it->second;
    }
  }
}

}  // namespace flow::graph
