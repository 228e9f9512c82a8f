// Collective op definitions; the kernel (core/kernels/cpu/comm.cpp) calls the process group.
#include "core/ops/comm.h"

#include <algorithm>
#include <numeric>

#include "core/interpreter.h"
#include "core/op.h"
#include "core/ops/creation.h"

namespace flow::distributed {
namespace {

int64_t total(const std::vector<int64_t>& sizes) { return std::accumulate(sizes.begin(), sizes.end(), int64_t{0}); }

Ranks attr_ranks(const Attrs& attrs, const char* op) { return resolve_ranks(attrs.get<std::vector<int64_t>>("ranks"), op); }

// dim0 sizes, one per member, non-negative.
void check_sizes(const std::vector<int64_t>& sizes, const Ranks& members, const char* what, const char* op) {
  if (sizes.size() != members.size()) fail(op, what, " has ", sizes.size(), " entries for ", members.size(), " members");
  for (int64_t size : sizes) {
    if (size < 0) fail(op, what, " has a negative size ", size);
  }
}

void check_has_dim0(const TensorMeta& input, const char* op) {
  if (input.shape.ndim() == 0) fail(op, "needs a tensor with at least one dimension, got a 0-d tensor");
}

TensorMeta with_dim0(const TensorMeta& meta, int64_t dim0) {
  TensorMeta out = meta;
  out.shape[0] = dim0;
  return out;
}

const OpDef& kAllReduce =
    OpBuilder("comm_all_reduce")
        .inputs({"input"})
        .outputs({"out"})
        .attrs({{"reduce", AttrType::kString}, {"ranks", AttrType::kInts}})
        .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          reduce_op_from_name(attrs.get<std::string>("reduce"), "all_reduce");
          attr_ranks(attrs, "all_reduce");
          return std::vector<TensorMeta>{in[0]};
        })
        .vjp([](const VjpContext& ctx) {
          const ReduceOp reduce = reduce_op_from_name(ctx.attrs.get<std::string>("reduce"), "all_reduce");
          if (reduce == ReduceOp::kMax || reduce == ReduceOp::kMin) fail("all_reduce", reduce_op_name(reduce), " is not differentiable");
          return TensorList{all_reduce(ctx.grad(), reduce, ctx.attrs.get<std::vector<int64_t>>("ranks"))};
        })
        .def();

const OpDef& kAllGather =
    OpBuilder("comm_all_gather")
        .inputs({"input"})
        .outputs({"out"})
        .attrs({{"sizes", AttrType::kInts}, {"ranks", AttrType::kInts}})
        .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          const Ranks members = attr_ranks(attrs, "all_gather");
          const auto& sizes = attrs.get<std::vector<int64_t>>("sizes");
          check_has_dim0(in[0], "all_gather");
          check_sizes(sizes, members, "sizes", "all_gather");
          const int64_t mine = sizes[static_cast<size_t>(member_index(members))];
          if (in[0].shape[0] != mine) {
            fail("all_gather", "this rank's input has ", in[0].shape[0], " rows but sizes says ", mine);
          }
          return std::vector<TensorMeta>{with_dim0(in[0], total(sizes))};
        })
        .vjp([](const VjpContext& ctx) {
          return TensorList{reduce_scatter(ctx.grad(), ctx.attrs.get<std::vector<int64_t>>("sizes"), ReduceOp::kSum,
                                           ctx.attrs.get<std::vector<int64_t>>("ranks"))};
        })
        .def();

const OpDef& kReduceScatter =
    OpBuilder("comm_reduce_scatter")
        .inputs({"input"})
        .outputs({"out"})
        .attrs({{"sizes", AttrType::kInts}, {"reduce", AttrType::kString}, {"ranks", AttrType::kInts}})
        .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          reduce_op_from_name(attrs.get<std::string>("reduce"), "reduce_scatter");
          const Ranks members = attr_ranks(attrs, "reduce_scatter");
          const auto& sizes = attrs.get<std::vector<int64_t>>("sizes");
          check_has_dim0(in[0], "reduce_scatter");
          check_sizes(sizes, members, "sizes", "reduce_scatter");
          if (in[0].shape[0] != total(sizes)) {
            fail("reduce_scatter", "input has ", in[0].shape[0], " rows but sizes add up to ", total(sizes));
          }
          return std::vector<TensorMeta>{with_dim0(in[0], sizes[static_cast<size_t>(member_index(members))])};
        })
        .vjp([](const VjpContext& ctx) {
          const ReduceOp reduce = reduce_op_from_name(ctx.attrs.get<std::string>("reduce"), "reduce_scatter");
          if (reduce != ReduceOp::kSum) fail("reduce_scatter", "only the sum is differentiable, got ", reduce_op_name(reduce));
          return TensorList{all_gather(ctx.grad(), ctx.attrs.get<std::vector<int64_t>>("sizes"), ctx.attrs.get<std::vector<int64_t>>("ranks"))};
        })
        .def();

const OpDef& kBroadcast =
    OpBuilder("comm_broadcast")
        .inputs({"input"})
        .outputs({"out"})
        .attrs({{"root", AttrType::kInt}, {"ranks", AttrType::kInts}})
        .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          const Ranks members = attr_ranks(attrs, "broadcast");
          const int64_t root = attrs.get<int64_t>("root");
          if (!std::binary_search(members.begin(), members.end(), root)) fail("broadcast", "root ", root, " is not a member");
          return std::vector<TensorMeta>{in[0]};
        })
        .vjp([](const VjpContext& ctx) {
          const Tensor sum = all_reduce(ctx.grad(), ReduceOp::kSum, ctx.attrs.get<std::vector<int64_t>>("ranks"));
          return TensorList{get_rank() == ctx.attrs.get<int64_t>("root") ? sum : zeros_like(sum)};
        })
        .def();

const OpDef& kAllToAll =
    OpBuilder("comm_all_to_all")
        .inputs({"input"})
        .outputs({"out"})
        .attrs({{"send_sizes", AttrType::kInts}, {"recv_sizes", AttrType::kInts}, {"ranks", AttrType::kInts}})
        .infer([](const std::vector<TensorMeta>& in, const Attrs& attrs) {
          const Ranks members = attr_ranks(attrs, "all_to_all");
          const auto& send = attrs.get<std::vector<int64_t>>("send_sizes");
          const auto& recv = attrs.get<std::vector<int64_t>>("recv_sizes");
          check_has_dim0(in[0], "all_to_all");
          check_sizes(send, members, "send_sizes", "all_to_all");
          check_sizes(recv, members, "recv_sizes", "all_to_all");
          if (in[0].shape[0] != total(send)) fail("all_to_all", "input has ", in[0].shape[0], " rows but send_sizes add up to ", total(send));
          return std::vector<TensorMeta>{with_dim0(in[0], total(recv))};
        })
        .vjp([](const VjpContext& ctx) {
          return TensorList{all_to_all(ctx.grad(), ctx.attrs.get<std::vector<int64_t>>("recv_sizes"),
                                       ctx.attrs.get<std::vector<int64_t>>("send_sizes"), ctx.attrs.get<std::vector<int64_t>>("ranks"))};
        })
        .def();

void check_peer(const Attrs& attrs, const char* op) {
  const int64_t peer = attrs.get<int64_t>("peer");
  const int64_t world = process_group(op).world_size();
  if (peer < 0 || peer >= world || peer == get_rank()) {
    fail(op, "peer rank ", peer, " must be another rank of the world (0..", world - 1, ", not this rank ", get_rank(), ")");
  }
}

const OpDef& kSend = OpBuilder("comm_send")
                         .inputs({"input"})
                         .outputs({})
                         .attrs({{"peer", AttrType::kInt}})
                         .infer([](const std::vector<TensorMeta>&, const Attrs& attrs) {
                           check_peer(attrs, "send");
                           return std::vector<TensorMeta>{};
                         })
                         .def();

const OpDef& kRecv = OpBuilder("comm_recv")
                         .inputs({})
                         .outputs({"out"})
                         .attrs({{"shape", AttrType::kInts}, {"dtype", AttrType::kDType}, {"device", AttrType::kDevice}, {"peer", AttrType::kInt}})
                         .infer([](const std::vector<TensorMeta>&, const Attrs& attrs) {
                           check_peer(attrs, "recv");
                           return std::vector<TensorMeta>{{Shape(attrs.get<std::vector<int64_t>>("shape")), attrs.get<DType>("dtype"),
                                                           attrs.get<Device>("device")}};
                         })
                         .def();

}  // namespace

bool is_collective(const OpDef& op) {
  return &op == &kAllReduce || &op == &kAllGather || &op == &kReduceScatter || &op == &kBroadcast || &op == &kAllToAll ||
         is_point_to_point(op);
}

bool is_point_to_point(const OpDef& op) { return &op == &kSend || &op == &kRecv; }

Ranks resolve_ranks(const Ranks& ranks, const char* op) {
  const int64_t world = process_group(op).world_size();
  Ranks members = ranks;
  if (members.empty()) {
    members.resize(static_cast<size_t>(world));
    std::iota(members.begin(), members.end(), int64_t{0});
    return members;
  }
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] < 0 || members[i] >= world) fail(op, "rank ", members[i], " is outside the group of ", world, " ranks");
    if (i > 0 && members[i] <= members[i - 1]) fail(op, "ranks must be sorted and unique");
  }
  if (!std::binary_search(members.begin(), members.end(), get_rank())) {
    fail(op, "this rank (", get_rank(), ") is not among the ranks taking part");
  }
  return members;
}

int64_t member_index(const Ranks& members) {
  return std::lower_bound(members.begin(), members.end(), get_rank()) - members.begin();
}

Tensor all_reduce(const Tensor& input, ReduceOp reduce, const Ranks& ranks) {
  return apply_one(kAllReduce, {input}, Attrs().set("reduce", std::string(reduce_op_name(reduce))).set("ranks", ranks));
}

Tensor all_gather(const Tensor& input, const std::vector<int64_t>& dim0_sizes, const Ranks& ranks) {
  return apply_one(kAllGather, {input}, Attrs().set("sizes", dim0_sizes).set("ranks", ranks));
}

Tensor all_gather(const Tensor& input, const Ranks& ranks) {
  if (input.dim() == 0) fail("all_gather", "needs a tensor with at least one dimension, got a 0-d tensor");
  const Ranks members = resolve_ranks(ranks, "all_gather");
  return all_gather(input, std::vector<int64_t>(members.size(), input.size(0)), ranks);
}

Tensor reduce_scatter(const Tensor& input, const std::vector<int64_t>& dim0_sizes, ReduceOp reduce, const Ranks& ranks) {
  return apply_one(kReduceScatter, {input},
                   Attrs().set("sizes", dim0_sizes).set("reduce", std::string(reduce_op_name(reduce))).set("ranks", ranks));
}

Tensor reduce_scatter(const Tensor& input, const Ranks& ranks) {
  if (input.dim() == 0) fail("reduce_scatter", "needs a tensor with at least one dimension, got a 0-d tensor");
  const auto members = static_cast<int64_t>(resolve_ranks(ranks, "reduce_scatter").size());
  if (input.size(0) % members != 0) {
    fail("reduce_scatter", "dim 0 (", input.size(0), ") does not divide by the ", members, " members; pass dim0_sizes for uneven pieces");
  }
  return reduce_scatter(input, std::vector<int64_t>(static_cast<size_t>(members), input.size(0) / members), ReduceOp::kSum, ranks);
}

Tensor broadcast(const Tensor& input, int64_t root, const Ranks& ranks) {
  return apply_one(kBroadcast, {input}, Attrs().set("root", root).set("ranks", ranks));
}

Tensor all_to_all(const Tensor& input, const std::vector<int64_t>& send_sizes, const std::vector<int64_t>& recv_sizes,
                  const Ranks& ranks) {
  return apply_one(kAllToAll, {input}, Attrs().set("send_sizes", send_sizes).set("recv_sizes", recv_sizes).set("ranks", ranks));
}

void send(const Tensor& input, int64_t peer) { apply(kSend, {input}, Attrs().set("peer", peer)); }

Tensor recv(const Shape& shape, DType dtype, const Device& device, int64_t peer) {
  return apply_one(kRecv, {}, Attrs().set("shape", shape).set("dtype", dtype).set("device", device).set("peer", peer));
}

}  // namespace flow::distributed
