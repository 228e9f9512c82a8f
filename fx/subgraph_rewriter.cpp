#include "fx/subgraph_rewriter.h"

#include <algorithm>
#include <optional>
#include <set>

#include "core/ops/all.h"

namespace flow::fx {
namespace {

// The state of one match attempt, copied before each alternative so a failed branch leaves
// nothing behind.
struct Attempt {
  std::map<std::string, std::string> matched;  // pattern op/get_attr node -> graph node
  std::map<std::string, std::string> bound;    // pattern placeholder -> graph value "<node>:<i>"
  std::set<std::string> claimed;               // graph nodes matched in this attempt
};

class Matcher {
 public:
  Matcher(const Graph& pattern, const Graph& graph, const std::set<std::string>& taken) : pattern_(pattern), graph_(graph), taken_(taken) {}

  bool match(const Value& pattern_value, const Value& graph_value, Attempt& attempt) const {
    const Node& p = pattern_value.node();
    if (p.op() == Opcode::kPlaceholder) {
      const std::string value = graph_value.job_name();
      auto bound = attempt.bound.find(p.name());
      if (bound != attempt.bound.end()) return bound->second == value;
      if (graph_value.node().op() == Opcode::kOutput) return false;
      attempt.bound[p.name()] = value;
      return true;
    }
    const Node& g = graph_value.node();
    if (pattern_value.index() != graph_value.index()) return false;
    auto matched = attempt.matched.find(p.name());
    if (matched != attempt.matched.end()) return matched->second == g.name();
    if (attempt.claimed.count(g.name()) || taken_.count(g.name()) || p.op() != g.op()) return false;
    if (p.op() == Opcode::kGetAttr) {
      if (!same_tensor(pattern_.attr_tensor(p), graph_.attr_tensor(g))) return false;
    } else if (p.op() == Opcode::kCallFunction) {
      if (p.target() != g.target() || p.num_outputs() != g.num_outputs() || !(p.kwargs() == g.kwargs())) return false;
    } else {
      return false;
    }
    const std::vector<Value> pattern_args = p.args();
    const std::vector<Value> graph_args = g.args();
    if (pattern_args.size() != graph_args.size()) return false;
    attempt.matched[p.name()] = g.name();
    attempt.claimed.insert(g.name());
    for (size_t i = 0; i < pattern_args.size(); ++i) {
      if (!match(pattern_args[i], graph_args[i], attempt)) return false;
    }
    return true;
  }

 private:
  static bool same_tensor(const Tensor& a, const Tensor& b) {
    if (a.shape() != b.shape() || a.dtype() != b.dtype() || a.device().is_meta() || b.device().is_meta()) return false;
    return a.to(kFloat64).contiguous().tolist<double>() == b.to(kFloat64).contiguous().tolist<double>();
  }

  const Graph& pattern_;
  const Graph& graph_;
  const std::set<std::string>& taken_;
};

// The graph values bound to the pattern's placeholders, by input index.
std::map<int64_t, std::string> bound_by_index(const Graph& pattern, const Attempt& attempt) {
  std::map<int64_t, std::string> by_index;
  for (const Node& placeholder : pattern.placeholders()) {
    auto bound = attempt.bound.find(placeholder.name());
    if (bound != attempt.bound.end()) by_index[placeholder.proto().attrs().at("index").i()] = bound->second;
  }
  return by_index;
}

// Whether the match can be replaced: its nodes other than the anchor are read only inside it,
// and no placeholder is bound to a node the rewrite erases.
bool self_contained(const Graph& graph, const Attempt& attempt, const std::string& anchor) {
  for (const std::string& name : attempt.claimed) {
    if (name == anchor) continue;
    for (const Node& user : graph.node(name).users()) {
      if (!attempt.claimed.count(user.name())) return false;
    }
  }
  for (const auto& [placeholder, value] : attempt.bound) {
    if (attempt.claimed.count(graph::parse_value_name(value).first)) return false;
  }
  return true;
}

Value value_in(const Graph& graph, const std::string& job_value) {
  const auto [node, index] = graph::parse_value_name(job_value);
  return Value(graph.node(node), index);
}

}  // namespace

std::vector<Match> replace_pattern(GraphModule& module, const GraphModule& pattern, const GraphModule& replacement) {
  const Graph& p = pattern.graph();
  const Graph& r = replacement.graph();
  p.lint();
  r.lint();
  if (p.outputs().size() != 1) fail("fx.replace_pattern", "the pattern returns ", p.outputs().size(), " tensors; it must return one");
  if (r.outputs().size() != 1) fail("fx.replace_pattern", "the replacement returns ", r.outputs().size(), " tensors; it must return one");
  const Value pattern_result = p.outputs()[0].args().at(0);
  if (pattern_result.node().op() != Opcode::kCallFunction) fail("fx.replace_pattern", "the pattern's result must be computed by an op");
  std::set<int64_t> pattern_inputs;
  for (const Node& placeholder : p.placeholders()) pattern_inputs.insert(placeholder.proto().attrs().at("index").i());
  for (const Node& placeholder : r.placeholders()) {
    if (!pattern_inputs.count(placeholder.proto().attrs().at("index").i())) {
      fail("fx.replace_pattern", "the replacement reads input ", placeholder.proto().attrs().at("index").i(), ", which the pattern does not use");
    }
  }

  Graph& graph = module.graph();
  graph.lint();
  // Find every non-overlapping match first, then rewrite.
  std::vector<std::pair<Attempt, std::string>> found;
  std::set<std::string> taken;
  const Matcher matcher(p, graph, taken);
  for (const Node& candidate : graph.nodes()) {
    if (candidate.op() != Opcode::kCallFunction || candidate.num_outputs() <= pattern_result.index()) continue;
    Attempt attempt;
    if (!matcher.match(pattern_result, Value(candidate, pattern_result.index()), attempt)) continue;
    if (!self_contained(graph, attempt, candidate.name())) continue;
    taken.insert(attempt.claimed.begin(), attempt.claimed.end());
    found.emplace_back(std::move(attempt), candidate.name());
  }

  std::vector<Match> matches;
  // An earlier rewrite may have replaced the value a later match reads: follow it there.
  std::map<std::string, std::string> replaced_values;
  const auto current_value = [&](std::string value) {
    for (auto next = replaced_values.find(value); next != replaced_values.end(); next = replaced_values.find(value)) value = next->second;
    return value_in(graph, value);
  };
  for (auto& [attempt, anchor_name] : found) {
    Match match;
    match.anchor = anchor_name;
    match.nodes_map = attempt.matched;
    for (const auto& [placeholder, value] : attempt.bound) match.nodes_map[placeholder] = value;
    const std::map<int64_t, std::string> inputs = bound_by_index(p, attempt);
    const Node anchor = graph.node(anchor_name);
    // Replacement node -> its output 0 (or the bound value of a placeholder) in the graph.
    std::map<std::string, Value> values;
    const auto mapped = [&](const Value& arg) {
      const Value& first = values.at(arg.node().name());
      return arg.index() == 0 ? first : Value(first.node(), arg.index());
    };
    std::optional<Value> result;
    {
      auto guard = graph.inserting_before(anchor);
      for (const Node& node : r.nodes()) {
        switch (node.op()) {
          case Opcode::kPlaceholder:
            values.emplace(node.name(), current_value(inputs.at(node.proto().attrs().at("index").i())));
            break;
          case Opcode::kGetAttr: {
            const Node constant = graph.create_constant(node.target(), r.attr_tensor(node));
            match.replacements.push_back(constant.name());
            values.emplace(node.name(), Value(constant));
            break;
          }
          case Opcode::kCallFunction: {
            std::vector<Value> args;
            for (const Value& arg : node.args()) args.push_back(mapped(arg));
            const Node created = graph.create_node(node.target(), args, node.kwargs());
            match.replacements.push_back(created.name());
            values.emplace(node.name(), Value(created));
            break;
          }
          case Opcode::kOutput:
            result = mapped(node.args().at(0));
            break;
        }
      }
    }
    graph.replace_all_uses(Value(anchor, pattern_result.index()), *result);
    replaced_values[graph::value_name(anchor_name, pattern_result.index())] = result->job_name();
    // The matched nodes, last first: each has no reader left when its turn comes.
    std::vector<std::string> erased(attempt.claimed.begin(), attempt.claimed.end());
    std::map<std::string, int> order;
    int position = 0;
    for (const Node& node : graph.nodes()) order[node.name()] = position++;
    std::sort(erased.begin(), erased.end(), [&](const std::string& a, const std::string& b) { return order.at(a) > order.at(b); });
    for (const std::string& name : erased) {
      const Node node = graph.node(name);
      if (node.users().empty()) graph.erase_node(node);
    }
    matches.push_back(std::move(match));
  }
  return matches;
}

std::vector<Match> replace_pattern(GraphModule& module, const ForwardFn& pattern, const ForwardFn& replacement, const TensorList& example_inputs) {
  const GraphModule traced_pattern = symbolic_trace(pattern, example_inputs);
  const GraphModule traced_replacement = symbolic_trace(replacement, example_inputs);
  return replace_pattern(module, traced_pattern, traced_replacement);
}

}  // namespace flow::fx
