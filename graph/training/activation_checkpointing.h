#pragma once
// Job pass "activation_checkpointing" (OneFlow's graph.block(module).config().activation_checkpointing;
// set with nn::GraphConfig::set_activation_checkpointing): the forward values computed inside a
// checkpointed module that backward reads are not kept from the forward to the backward, but
// recomputed from the module's inputs just before backward needs them.
//
// For each checkpointed module path, the forward nodes of its scope (the path or a sub-scope of
// it, not made by backward; nested paths count as the outermost) that compute a value a backward node reads are cloned, with the
// forward nodes of the scope they need in turn, back to the scope's inputs: values from outside
// the scope, variables and constants, and values that are kept. Kept are the module's outputs
// (values a forward node outside it reads: the forward keeps them alive anyway), and the outputs
// of nodes a clone could not reproduce: random ops (a clone would draw other numbers), in-place
// writes, collectives, values something writes in place, and values computed from random draws
// alone (dropout's boolean mask rather than the uniform draws behind it). Each clone ("<node>.recompute")
// is inserted just before its first reader (a backward node or another clone), and the backward
// nodes read the clones instead of the originals, whose values then die with the forward.
//
// nn::Graph runs it after common-subexpression and dead-code elimination (which would merge each
// clone back into its original) and before element-wise fusion, which only moves a group to its
// last member and so never computes a clone earlier.
#include <set>
#include <string>

#include "graph/passes.h"

namespace flow::graph::training {

// Rewrites `job` as above. scopes: module paths ("model.h.0"); gradient_nodes: the nodes backward
// made (Tracer::gradient_nodes()). Notes each clone in context.record.recomputed.
void checkpoint_activations(proto::Job& job, PassContext& context, const std::set<std::string>& scopes,
                            const std::set<std::string>& gradient_nodes);

}  // namespace flow::graph::training
