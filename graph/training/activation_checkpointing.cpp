#include "graph/training/activation_checkpointing.h"

#include <glog/logging.h>

#include <algorithm>
#include <climits>
#include <map>
#include <vector>

#include "core/ops/comm.h"

namespace flow::graph::training {
namespace {

// The checkpointed module path a node of scope `scope` runs inside (the outermost one, when paths
// nest), or "" for none.
std::string checkpointed_path(const std::string& scope, const std::set<std::string>& paths) {
  for (const std::string& path : paths) {  // sorted: a path comes before the paths inside it
    if (scope == path || (scope.size() > path.size() && scope.compare(0, path.size(), path) == 0 && scope[path.size()] == '.')) return path;
  }
  return "";
}

// Whether a clone computes what the node computed: a deterministic op without side effects whose
// outputs nothing overwrites.
bool reproducible(const proto::Node& node, const std::set<std::string>& written) {
  const OpDef& op = find_op(node.op());
  if (op.random || op.inplace || distributed::is_collective(op) || node.op() == "empty" || has_side_effects(node)) return false;
  for (int j = 0; j < node.outputs_size(); ++j) {
    if (written.count(value_name(node.name(), j))) return false;
  }
  return true;
}

std::string unique_name(const std::string& base, std::set<std::string>& taken) {
  std::string name = base;
  for (int i = 1; taken.count(name); ++i) name = base + "_" + std::to_string(i);
  taken.insert(name);
  return name;
}

}  // namespace

void checkpoint_activations(proto::Job& job, PassContext& context, const std::set<std::string>& scopes,
                            const std::set<std::string>& gradient_nodes) {
  if (scopes.empty() || gradient_nodes.empty()) return;
  const JobIndex index(job);
  const std::set<std::string> written = written_in_place(job);
  const int n = job.nodes_size();
  auto producer = [&](const std::string& value) { return index.position(parse_value_name(value).first); };
  auto is_gradient = [&](int position) { return gradient_nodes.count(job.nodes(position).name()) != 0; };

  // The checkpointed module each forward node runs in ("" for none).
  std::vector<std::string> module(n);
  for (int p = 0; p < n; ++p) {
    const proto::Node& node = job.nodes(p);
    if (!is_source_kind(node.op()) && node.op() != kOutputOp && !is_gradient(p)) module[p] = checkpointed_path(node.scope(), scopes);
  }
  // Forward nodes of the checkpointed modules that a clone may recompute. Kept instead: random
  // draws and what is computed from them alone (`draws`), and the module's outputs, which the
  // forward after it reads anyway.
  std::vector<char> recomputable(n, 0), draws(n, 0);
  for (int p = 0; p < n; ++p) {
    const proto::Node& node = job.nodes(p);
    if (module[p].empty()) continue;
    bool leaves_module = false;
    for (int j = 0; j < node.outputs_size(); ++j) {
      for (int reader : index.consumers(value_name(node.name(), j))) leaves_module = leaves_module || (!is_gradient(reader) && module[reader] != module[p]);
    }
    if (leaves_module) continue;
    if (find_op(node.op()).random) {
      draws[p] = 1;
      continue;
    }
    if (!reproducible(node, written)) continue;
    bool any_draw = false, only_draws = true;
    for (const auto& input : node.inputs()) {
      const int q = producer(input);
      any_draw = any_draw || draws[q];
      only_draws = only_draws && (draws[q] || job.nodes(q).op() == kConstantOp);
    }
    if (any_draw && only_draws) {
      draws[p] = 1;
    } else {
      recomputable[p] = 1;
    }
  }

  // What backward reads, and the recomputable nodes those need in turn.
  std::vector<char> cloned(n, 0);
  std::vector<int> stack;
  for (int p = 0; p < n; ++p) {
    if (!recomputable[p]) continue;
    const proto::Node& node = job.nodes(p);
    for (int j = 0; j < node.outputs_size(); ++j) {
      const auto& readers = index.consumers(value_name(node.name(), j));
      if (std::any_of(readers.begin(), readers.end(), is_gradient)) stack.push_back(p);
    }
  }
  while (!stack.empty()) {
    const int p = stack.back();
    stack.pop_back();
    if (cloned[p]) continue;
    cloned[p] = 1;
    for (const auto& input : job.nodes(p).inputs()) {
      const int q = producer(input);
      if (recomputable[q] && !cloned[q]) stack.push_back(q);
    }
  }
  if (std::none_of(cloned.begin(), cloned.end(), [](char c) { return c != 0; })) return;

  std::set<std::string> taken;
  for (const auto& node : job.nodes()) taken.insert(node.name());
  std::map<std::string, std::string> renamed;  // original value -> the clone's
  std::map<int, proto::Node> clones;           // by the original's position
  for (int p = 0; p < n; ++p) {
    if (!cloned[p]) continue;
    proto::Node& clone = clones[p] = job.nodes(p);
    clone.set_name(unique_name(job.nodes(p).name() + ".recompute", taken));
    for (int j = 0; j < clone.outputs_size(); ++j) renamed[value_name(job.nodes(p).name(), j)] = value_name(clone.name(), j);
  }
  // Each clone goes just before its first reader: a backward node, or a clone placed earlier.
  // Readers come later in the Job than what they read, so one backward sweep sees readers first.
  std::vector<int> at(n, INT_MAX);
  for (int p = n - 1; p >= 0; --p) {
    if (!cloned[p]) continue;
    const proto::Node& node = job.nodes(p);
    for (int j = 0; j < node.outputs_size(); ++j) {
      for (int reader : index.consumers(value_name(node.name(), j))) {
        if (is_gradient(reader)) at[p] = std::min(at[p], reader);
        if (cloned[reader]) at[p] = std::min(at[p], at[reader]);
      }
    }
    CHECK_NE(at[p], INT_MAX) << "clone of " << node.name() << " has no reader";
  }
  std::map<int, std::vector<int>> inserted_before;  // reader position -> originals, in Job order
  for (const auto& [p, clone] : clones) inserted_before[at[p]].push_back(p);

  auto rewire = [&](proto::Node& node) {
    for (auto& input : *node.mutable_inputs()) {
      auto it = renamed.find(input);
      if (it != renamed.end()) input = it->second;
    }
  };
  // Names and roles before the nodes move into the rewritten Job.
  std::vector<std::string> names;
  std::vector<char> gradient(n, 0);
  for (int p = 0; p < n; ++p) {
    names.push_back(job.nodes(p).name());
    gradient[p] = is_gradient(p);
  }
  proto::Job rewritten;
  rewritten.mutable_nodes()->Reserve(n + static_cast<int>(clones.size()));
  for (int p = 0; p < n; ++p) {
    auto inserted = inserted_before.find(p);
    if (inserted != inserted_before.end()) {
      for (int original : inserted->second) {
        proto::Node& clone = clones.at(original);
        rewire(clone);
        context.record.recomputed.push_back({{clone.name(), clone.op()}, names[original]});
        rewritten.add_nodes()->Swap(&clone);
      }
    }
    proto::Node* node = rewritten.add_nodes();
    node->Swap(job.mutable_nodes(p));
    if (gradient[p]) rewire(*node);
  }
  job.mutable_nodes()->Swap(rewritten.mutable_nodes());
}

}  // namespace flow::graph::training
