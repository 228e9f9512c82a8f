// The collective ops' one kernel: the installed process group does the work on its backend for
// the tensors' device (Gloo for CPU, NCCL for CUDA), so the same registration serves both.
#include "core/comm/process_group.h"
#include "core/op.h"
#include "core/ops/comm.h"
#include "core/ops/copy.h"

namespace flow::cpu {
namespace {

using distributed::process_group;
using distributed::ReduceOp;

const std::vector<int64_t>& ints(const Attrs& attrs, const char* name) { return attrs.get<std::vector<int64_t>>(name); }

ReduceOp reduce_of(const Attrs& attrs, const char* op) {
  return distributed::reduce_op_from_name(attrs.get<std::string>("reduce"), op);
}

void all_reduce_kernel(KernelContext& ctx) {
  detail::copy_into(ctx.outputs[0], ctx.inputs[0]);
  process_group("all_reduce").all_reduce(ctx.outputs[0], reduce_of(ctx.attrs, "all_reduce"), ints(ctx.attrs, "ranks"))->wait();
}

void all_gather_kernel(KernelContext& ctx) {
  process_group("all_gather").all_gather(ctx.inputs[0], ctx.outputs[0], ints(ctx.attrs, "sizes"), ints(ctx.attrs, "ranks"))->wait();
}

void reduce_scatter_kernel(KernelContext& ctx) {
  process_group("reduce_scatter")
      .reduce_scatter(ctx.inputs[0], ctx.outputs[0], ints(ctx.attrs, "sizes"), reduce_of(ctx.attrs, "reduce_scatter"),
                      ints(ctx.attrs, "ranks"))
      ->wait();
}

void broadcast_kernel(KernelContext& ctx) {
  detail::copy_into(ctx.outputs[0], ctx.inputs[0]);
  process_group("broadcast").broadcast(ctx.outputs[0], ctx.attrs.get<int64_t>("root"), ints(ctx.attrs, "ranks"))->wait();
}

void all_to_all_kernel(KernelContext& ctx) {
  process_group("all_to_all")
      .all_to_all(ctx.inputs[0], ints(ctx.attrs, "send_sizes"), ctx.outputs[0], ints(ctx.attrs, "recv_sizes"), ints(ctx.attrs, "ranks"))
      ->wait();
}

void send_kernel(KernelContext& ctx) { process_group("send").send(ctx.inputs[0], ctx.attrs.get<int64_t>("peer"))->wait(); }

void recv_kernel(KernelContext& ctx) { process_group("recv").recv(ctx.outputs[0], ctx.attrs.get<int64_t>("peer"))->wait(); }

#define FLOW_REGISTER_COMM_KERNEL(op, fn)                                   \
  FLOW_REGISTER_KERNEL(op, DeviceType::kCPU, storage_dtypes(), fn);         \
  FLOW_REGISTER_CUDA_COMM_KERNEL(op, fn)
#ifdef FLOW_WITH_CUDA
#define FLOW_REGISTER_CUDA_COMM_KERNEL(op, fn) FLOW_REGISTER_KERNEL(op, DeviceType::kCUDA, storage_dtypes(), fn);
#else
#define FLOW_REGISTER_CUDA_COMM_KERNEL(op, fn)
#endif

FLOW_REGISTER_COMM_KERNEL("comm_all_reduce", all_reduce_kernel)
FLOW_REGISTER_COMM_KERNEL("comm_all_gather", all_gather_kernel)
FLOW_REGISTER_COMM_KERNEL("comm_reduce_scatter", reduce_scatter_kernel)
FLOW_REGISTER_COMM_KERNEL("comm_broadcast", broadcast_kernel)
FLOW_REGISTER_COMM_KERNEL("comm_all_to_all", all_to_all_kernel)
FLOW_REGISTER_COMM_KERNEL("comm_send", send_kernel)
FLOW_REGISTER_COMM_KERNEL("comm_recv", recv_kernel)

}  // namespace
}  // namespace flow::cpu
