#pragma once
// Collectives as ops: one definition each (schema, meta, vjp), one kernel that hands the work to
// the installed process group (Gloo for CPU tensors, NCCL for CUDA ones). They act on this
// rank's local tensors along dim 0; boxing of global tensors composes them, and Graph jobs can
// record them like any other op. `ranks` lists the global ranks taking part (empty: all).
#include <vector>

#include "core/comm/process_group.h"
#include "core/op.h"
#include "core/tensor.h"

namespace flow::distributed {

// Every member gets the reduction of all members' inputs. vjp (sum, avg): the same all-reduce
// of the gradient, as in tensor-parallel layers; max and min are not differentiable.
Tensor all_reduce(const Tensor& input, ReduceOp reduce = ReduceOp::kSum, const Ranks& ranks = {});
// Concatenation along dim 0 of every member's input, in member order; dim0_sizes[i] rows come
// from member i (uneven splits allowed; pass {} as ranks for all). vjp: reduce_scatter of the
// gradient.
Tensor all_gather(const Tensor& input, const std::vector<int64_t>& dim0_sizes, const Ranks& ranks);
// Equal pieces: every member's input has the same shape.
Tensor all_gather(const Tensor& input, const Ranks& ranks = {});
// This member's rows (dim0_sizes[i] rows for member i) of the reduction of all members' inputs.
// vjp (sum): all_gather of the gradient.
Tensor reduce_scatter(const Tensor& input, const std::vector<int64_t>& dim0_sizes, ReduceOp reduce, const Ranks& ranks);
// Equal pieces: dim 0 must divide by the number of members.
Tensor reduce_scatter(const Tensor& input, const Ranks& ranks = {});
// Every member gets root's input (root is a global rank). vjp: the gradients' sum, at root.
Tensor broadcast(const Tensor& input, int64_t root, const Ranks& ranks = {});
// Rows [sum(send_sizes[:i]), +send_sizes[i]) of input go to member i; the output stacks the
// recv_sizes[i] rows received from each member i, in member order. vjp: the reverse exchange.
Tensor all_to_all(const Tensor& input, const std::vector<int64_t>& send_sizes, const std::vector<int64_t>& recv_sizes,
                  const Ranks& ranks = {});

// Point to point: sends input (this rank's, whole) to global rank `peer`. The n-th send from a
// rank to a peer meets the peer's n-th recv from that rank. Not differentiable: moves between
// placements are (to_global's vjp moves the gradient back).
void send(const Tensor& input, int64_t peer);
// A tensor of shape and dtype on `device`, received from global rank `peer`.
Tensor recv(const Shape& shape, DType dtype, const Device& device, int64_t peer);

// Whether op is one of the collectives or point-to-point ops above: its peers wait for it, in
// the same order, so a compiler may neither drop it nor evaluate it ahead of time (constant
// folding) on one rank.
bool is_collective(const OpDef& op);
// Whether op is send or recv: a Graph runs them on threads of their own (job/plan.h).
bool is_point_to_point(const OpDef& op);

// The members of a collective (ranks, or every rank when empty), checked: sorted, unique,
// inside the world, including this rank. flow::Error prefixed with [op] otherwise.
Ranks resolve_ranks(const Ranks& ranks, const char* op);
// This rank's position among members.
int64_t member_index(const Ranks& members);

}  // namespace flow::distributed
