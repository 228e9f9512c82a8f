#pragma once
// Symbolic profile of a GraphModule in the style of Colossal-AI's Siu (MetaInfoProp): per node,
// the bytes and FLOPs of its forward and of its backward, from metas alone, so a 100x3x224x224
// meta input profiles a model without allocating or running anything.
//
// Conventions (each op's share lives beside its definition, in OpDef::flops and
// OpDef::profile_cost, core/op.h):
//  - Output size: bytes of the node's outputs. Views and in-place ops share their input's memory
//    and report 0; get_attr nodes report their tensor as Param size instead.
//  - Temp size: workspace an op needs besides its outputs (ProfileCost::temp_bytes; 0 for every op
//    flow has, since no kernel allocates scratch memory).
//  - Backward size: bytes of the activations the op's vjp reads (ProfileCost::saved_inputs and
//    saved_outputs): linear, matmul and conv keep their input, relu its output, clamp (ReLU6) its
//    input, add nothing, batch norm its input (and in training its batch statistics). Parameters
//    and buffers among them are not charged: they live anyway and are counted as Param size.
//  - Fwd FLOPs: the op's flops slot (2 per multiply-accumulate; 1 per element for element-wise).
//  - Bwd FLOPs: ProfileCost::backward_flops: 2x forward for matmul, linear, conv and batch norm
//    (grad input and grad weight), 1x for element-wise ops.
// Ops without a flops or profile_cost slot report 0 there.
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "fx/graph_module.h"

namespace flow::fx {

struct ProfileRow {
  Opcode op = Opcode::kCallFunction;
  std::string name;
  std::string target;  // the op for call_function nodes
  int64_t output_bytes = 0;
  int64_t temp_bytes = 0;
  int64_t param_bytes = 0;
  int64_t backward_bytes = 0;
  int64_t forward_flops = 0;
  int64_t backward_flops = 0;
};

struct ProfileTable {
  std::vector<ProfileRow> rows;  // one per node, in execution order
  // The largest sum of activations alive at once when the nodes run in order (inference: a value
  // lives from its node to its last reader; graph inputs and outputs included, views and in-place
  // outputs charged to the value owning their memory).
  int64_t peak_activation_bytes = 0;

  // Column sums (op and name empty).
  ProfileRow totals() const;
  // Inference peak: every parameter and buffer, plus peak_activation_bytes. Training would add
  // the backward sizes kept until the backward (totals().backward_bytes).
  int64_t peak_memory_estimate() const;
};

// "1.50 MB": bytes in B, KB, MB or GB (powers of 1024).
std::string format_bytes(int64_t bytes);
// "600.00 MFLOPs": FLOPs in FLOPs, KFLOPs, MFLOPs, GFLOPs or TFLOPs (powers of 1000).
std::string format_flops(int64_t flops);

// Siu's table: Op type, Op name, Output size, Temp size, Param size, Backward size, Fwd FLOPs,
// Bwd FLOPs, one row per node, then the totals and the peak memory estimate.
std::ostream& operator<<(std::ostream& out, const ProfileTable& table);

// Runs ShapeProp on inputs (meta tensors work: nothing is allocated) and profiles every node of
// gm. verbose prints the table to std::cout. Inputs not matching gm's placeholders are a
// flow::Error.
ProfileTable symbolic_profile(GraphModule& gm, const TensorList& inputs, bool verbose = false);

}  // namespace flow::fx
