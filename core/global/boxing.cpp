#include "core/global/boxing.h"

#include <glog/logging.h>

#include <algorithm>

#include "core/grad_mode.h"
#include "core/ops/all.h"
#include "core/ops/comm.h"

namespace flow::distributed {
namespace {

// The members of one 1-D transition: the ranks whose coordinates equal this rank's in every
// hierarchy dimension but `dim`, in placement order (the order of the pieces).
struct Group {
  Ranks ranks;
  int64_t index = 0;  // this rank's position
  int64_t size() const { return static_cast<int64_t>(ranks.size()); }
};

Group group_along(const Placement& placement, size_t dim) {
  const std::vector<int64_t> mine = placement.coordinates(placement.index_of(get_rank()));
  Group group;
  for (int64_t i = 0; i < placement.size(); ++i) {
    const std::vector<int64_t> coords = placement.coordinates(i);
    bool same = true;
    for (size_t d = 0; d < coords.size(); ++d) same = same && (d == dim || coords[d] == mine[d]);
    if (!same) continue;
    if (coords[dim] == mine[dim]) group.index = group.size();
    group.ranks.push_back(placement.ranks()[static_cast<size_t>(i)]);
  }
  if (!std::is_sorted(group.ranks.begin(), group.ranks.end())) {
    fail("to_global", "boxing needs the ranks of ", placement.str(), " in increasing order along each dimension");
  }
  return group;
}

// Moves `axis` to the front, contiguous, so that a dim-0 collective acts on it.
Tensor axis_to_front(const Tensor& x, int64_t axis) { return axis == 0 ? x.contiguous() : x.transpose(0, axis).contiguous(); }
Tensor axis_from_front(const Tensor& x, int64_t axis) { return axis == 0 ? x : x.transpose(0, axis).contiguous(); }

Tensor split_to_split(const Tensor& x, const Shape& logical, int64_t from, int64_t to, const Group& group) {
  // Block j of the send buffer is this rank's rows of `to`-piece j, with `from` moved to the
  // front and flattened; what member j sends back is its `from`-piece of this rank's `to`-piece.
  const int64_t n = group.size();
  TensorList blocks;
  std::vector<int64_t> send_sizes, recv_sizes;
  const int64_t my_to = split_part_size(logical[to], n, group.index);
  const int64_t others = x.numel() / std::max<int64_t>(1, x.size(from) * x.size(to));
  for (int64_t j = 0; j < n; ++j) {
    Tensor block = axis_to_front(x.narrow(to, split_part_start(logical[to], n, j), split_part_size(logical[to], n, j)), from);
    send_sizes.push_back(block.numel());
    recv_sizes.push_back(split_part_size(logical[from], n, j) * my_to * others);
    blocks.push_back(block.reshape({block.numel()}));
  }
  const Tensor received = all_to_all(cat(blocks, 0), send_sizes, recv_sizes, group.ranks);
  Shape front_shape = x.shape();
  front_shape[static_cast<size_t>(to)] = my_to;
  std::swap(front_shape[0], front_shape[static_cast<size_t>(from)]);
  TensorList pieces;
  int64_t offset = 0;
  for (int64_t j = 0; j < n; ++j) {
    Shape piece_shape = front_shape;
    piece_shape[0] = split_part_size(logical[from], n, j);
    pieces.push_back(received.narrow(0, offset, recv_sizes[static_cast<size_t>(j)]).reshape(piece_shape));
    offset += recv_sizes[static_cast<size_t>(j)];
  }
  return axis_from_front(cat(pieces, 0), from);
}

// One transition among the members of `group`, whose pieces make up a logical tensor of shape
// `logical`.
Tensor transition(const Tensor& x, const Shape& logical, const Sbp& src, const Sbp& dst, const Group& group) {
  if (src == dst) return x;
  const int64_t n = group.size();
  if (src.is_partial_sum()) {
    if (dst.is_broadcast()) return all_reduce(x, ReduceOp::kSum, group.ranks);
    const std::vector<int64_t> sizes = split_part_sizes(logical[dst.axis], n);
    return axis_from_front(reduce_scatter(axis_to_front(x, dst.axis), sizes, ReduceOp::kSum, group.ranks), dst.axis);
  }
  if (src.is_broadcast()) {
    if (dst.is_partial_sum()) return group.index == 0 ? x : zeros_like(x);
    return x.narrow(dst.axis, split_part_start(logical[dst.axis], n, group.index), split_part_size(logical[dst.axis], n, group.index))
        .contiguous();
  }
  if (dst.is_broadcast()) {
    const std::vector<int64_t> sizes = split_part_sizes(logical[src.axis], n);
    return axis_from_front(all_gather(axis_to_front(x, src.axis), sizes, group.ranks), src.axis);
  }
  if (dst.is_partial_sum()) {
    // Each rank's piece in place in zeros of the logical shape: the pieces sum to the tensor.
    Tensor full = zeros(logical, TensorOptions().dtype(x.dtype()).device(x.device()));
    full.narrow(src.axis, split_part_start(logical[src.axis], n, group.index), x.size(src.axis)).copy_(x);
    return full;
  }
  return split_to_split(x, logical, src.axis, dst.axis, group);
}

// The logical shape of what the members of a transition along `dim` hold together: the
// pieces' shape under every other dimension's sbp.
Shape group_logical(const Shape& logical, const Placement& placement, const NdSbp& current, size_t dim) {
  NdSbp others = current;
  others[dim] = Sbp::broadcast();
  return local_shape(logical, placement, others, placement.index_of(get_rank()));
}

// Whether `inner` (the sbp of the other dimension) lets dimension 0 change from `from` to `to`
// independently: the two ways of cutting must commute (not both splitting one axis).
bool commutes(const Sbp& inner, const Sbp& from, const Sbp& to) {
  auto clashes = [&](const Sbp& outer) { return inner.is_split() && outer.is_split() && outer.axis == inner.axis; };
  return !clashes(from) && !clashes(to);
}

}  // namespace

double boxing_cost(const Sbp& src, const Sbp& dst, double bytes, int64_t parts) {
  if (src == dst || parts == 1 || src.is_broadcast()) return 0;
  const double n = static_cast<double>(parts);
  if (src.is_partial_sum()) return dst.is_broadcast() ? 2 * (n - 1) / n * bytes : (n - 1) / n * bytes;
  if (dst.is_broadcast()) return (n - 1) / n * bytes;
  if (dst.is_partial_sum()) return 0;
  return (n - 1) / (n * n) * bytes;
}

Tensor box(const Tensor& local, const Shape& logical, const Placement& placement, const NdSbp& src, const NdSbp& dst) {
  CHECK_EQ(src.size(), dst.size());
  if (src == dst) return local;
  // Pieces are computed on local tensors; the global to_global op records the gradient.
  autograd::NoGradGuard no_grad;
  NdSbp current = src;
  Tensor x = local;
  auto step = [&](size_t dim, const Sbp& to) {
    if (current[dim] == to) return;
    x = transition(x, group_logical(logical, placement, current, dim), current[dim], to, group_along(placement, dim));
    current[dim] = to;
  };
  if (src.size() == 1) {
    step(0, dst[0]);
    return x;
  }
  if (src.size() != 2) fail("to_global", "boxing supports 1-D and 2-D placements, got ", placement.hierarchy().ndim(), "-D");
  // The inner dimension can always change on its own; the outer one only when its cut
  // commutes with the inner one. Otherwise go through (B, B).
  if (commutes(dst[1], src[0], dst[0])) {
    step(1, dst[1]);
    step(0, dst[0]);
  } else if (commutes(src[1], src[0], dst[0])) {
    step(0, dst[0]);
    step(1, dst[1]);
  } else {
    step(1, Sbp::broadcast());
    step(0, dst[0]);
    step(1, dst[1]);
  }
  return x;
}

}  // namespace flow::distributed
