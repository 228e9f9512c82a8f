#pragma once
// Conv + batch-norm fusion written with the public flow::fx API only (torch.fx's classic
// example): every conv2d whose only reader is a batch_norm_eval gets the batch norm folded into
// its weight and bias, computed once from the running statistics, and the batch norm is erased.
// Shared by examples/fx_conv_bn_fuse.cpp and tests/fx.
#include <string>
#include <vector>

#include "core/grad_mode.h"
#include "core/ops/all.h"
#include "fx/graph_module.h"

namespace fx_example {

// The tensors of get_attr arguments args[first...], or an empty list when one is computed.
inline flow::TensorList attr_tensors(const flow::fx::Graph& graph, const std::vector<flow::fx::Value>& args, size_t first) {
  flow::TensorList tensors;
  for (size_t i = first; i < args.size(); ++i) {
    if (args[i].node().op() != flow::fx::Opcode::kGetAttr) return {};
    tensors.push_back(graph.attr_tensor(args[i].node()));
  }
  return tensors;
}

// Returns the names of the batch norms folded away.
inline std::vector<std::string> fuse_conv_bn(flow::fx::GraphModule& module) {
  using flow::fx::Node;
  using flow::fx::Opcode;
  flow::fx::Graph& graph = module.graph();
  std::vector<std::string> fused;
  for (const Node& bn : graph.nodes()) {
    if (bn.op() != Opcode::kCallFunction || bn.target() != "batch_norm_eval") continue;
    const Node conv = bn.args()[0].node();
    if (conv.op() != Opcode::kCallFunction || conv.target() != "conv2d") continue;
    // The conv's output is needed unnormalised elsewhere: folding would change that reader.
    if (conv.users().size() != 1) continue;
    const std::vector<flow::fx::Value> conv_args = conv.args();
    const flow::TensorList conv_state = attr_tensors(graph, conv_args, 1);       // weight [, bias]
    const flow::TensorList bn_state = attr_tensors(graph, bn.args(), 1);         // mean, var [, gamma, beta]
    if (conv_state.empty() || bn_state.empty()) continue;

    const flow::autograd::NoGradGuard no_grad;
    const flow::Tensor& weight = conv_state[0];
    const flow::Tensor& mean = bn_state[0];
    const flow::Tensor& var = bn_state[1];
    const double eps = bn.kwargs().get<double>("eps");
    flow::Tensor scale = flow::rsqrt(var + eps);
    if (bn_state.size() == 4) scale = scale * bn_state[2];
    const flow::Tensor conv_bias = conv_state.size() == 2 ? conv_state[1] : flow::zeros_like(mean);
    flow::Tensor bias = (conv_bias - mean) * scale;
    if (bn_state.size() == 4) bias = bias + bn_state[3];
    const flow::Tensor fused_weight = weight * scale.reshape({-1, 1, 1, 1});

    Node fused_conv;
    {
      auto guard = graph.inserting_before(conv);
      const Node w = graph.create_constant(conv.name() + ".fused_weight", fused_weight.contiguous());
      const Node b = graph.create_constant(conv.name() + ".fused_bias", bias.contiguous());
      fused_conv = graph.create_node("conv2d", {conv_args[0], w, b}, conv.kwargs(), conv.name() + "_bn");
    }
    bn.replace_all_uses_with(fused_conv);
    graph.erase_node(bn);
    graph.erase_node(conv);
    fused.push_back(bn.name());
  }
  // The old weights and running statistics nothing reads now.
  graph.eliminate_dead_code();
  graph.lint();
  return fused;
}

}  // namespace fx_example
