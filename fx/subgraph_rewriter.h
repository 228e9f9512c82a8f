#pragma once
// torch.fx's subgraph rewriter: finds every non-overlapping occurrence of a pattern graph in a
// GraphModule and replaces it with a replacement graph.
#include <map>
#include <string>
#include <vector>

#include "fx/graph_module.h"

namespace flow::fx {

// One replaced occurrence. Node names refer to the graph before the rewrite (the matched nodes
// are erased by it), except `replacements`, the nodes inserted for it.
struct Match {
  std::string anchor;                            // the graph node the pattern's result matched
  std::map<std::string, std::string> nodes_map;  // pattern node -> graph node (placeholders -> the value bound, "<node>:<i>")
  std::vector<std::string> replacements;
};

// Matching is structural: each pattern op matches a graph node of the same op, attributes,
// arity and output count whose arguments match the pattern's arguments; a pattern placeholder
// matches any value (the same value wherever it recurs); a pattern constant matches a get_attr
// node holding an equal tensor. Matched nodes other than the anchor may not be read outside the
// match. The pattern returns one tensor; the replacement reads the pattern's placeholders by
// index and returns one tensor, which the anchor's readers then read. Returns the matches in
// graph order.
std::vector<Match> replace_pattern(GraphModule& module, const GraphModule& pattern, const GraphModule& replacement);
// Traces pattern and replacement on example_inputs (their metas: what the ops' meta inference
// needs), then rewrites as above.
std::vector<Match> replace_pattern(GraphModule& module, const ForwardFn& pattern, const ForwardFn& replacement, const TensorList& example_inputs);

}  // namespace flow::fx
