#include "distributed/device_dispatch.h"

#include "core/error.h"
#include "distributed/gloo_process_group.h"

namespace flow::distributed {

DeviceDispatchGroup::DeviceDispatchGroup(std::shared_ptr<GlooProcessGroup> cpu, std::shared_ptr<ProcessGroup> cuda,
                                         std::string cuda_missing)
    : cpu_(std::move(cpu)), cuda_(std::move(cuda)), cuda_missing_(std::move(cuda_missing)) {}

// NCCL's work may use the Gloo group (agreement checks), so it goes first.
DeviceDispatchGroup::~DeviceDispatchGroup() { cuda_.reset(); }

int64_t DeviceDispatchGroup::rank() const { return cpu_->rank(); }
int64_t DeviceDispatchGroup::world_size() const { return cpu_->world_size(); }
int64_t DeviceDispatchGroup::local_rank() const { return cpu_->local_rank(); }
int64_t DeviceDispatchGroup::local_world_size() const { return cpu_->local_world_size(); }
std::chrono::milliseconds DeviceDispatchGroup::timeout() const { return cpu_->timeout(); }

ProcessGroup& DeviceDispatchGroup::backend_for(const Tensor& tensor, const char* op) {
  FLOW_ARG_CHECK(tensor.defined(), op, "got an undefined tensor");
  if (tensor.device().is_cpu()) return *cpu_;
  if (!cuda_) fail(op, "rank ", rank(), ": no backend for CUDA tensors: ", cuda_missing_);
  return *cuda_;
}

std::shared_ptr<Work> DeviceDispatchGroup::all_reduce(const Tensor& tensor, ReduceOp reduce, const Ranks& ranks) {
  return backend_for(tensor, "all_reduce").all_reduce(tensor, reduce, ranks);
}

std::shared_ptr<Work> DeviceDispatchGroup::all_gather(const Tensor& input, const Tensor& output,
                                                      const std::vector<int64_t>& dim0_sizes, const Ranks& ranks) {
  return backend_for(input, "all_gather").all_gather(input, output, dim0_sizes, ranks);
}

std::shared_ptr<Work> DeviceDispatchGroup::reduce_scatter(const Tensor& input, const Tensor& output,
                                                          const std::vector<int64_t>& dim0_sizes, ReduceOp reduce,
                                                          const Ranks& ranks) {
  return backend_for(input, "reduce_scatter").reduce_scatter(input, output, dim0_sizes, reduce, ranks);
}

std::shared_ptr<Work> DeviceDispatchGroup::broadcast(const Tensor& tensor, int64_t root, const Ranks& ranks) {
  return backend_for(tensor, "broadcast").broadcast(tensor, root, ranks);
}

std::shared_ptr<Work> DeviceDispatchGroup::all_to_all(const Tensor& input, const std::vector<int64_t>& send_sizes,
                                                      const Tensor& output, const std::vector<int64_t>& recv_sizes,
                                                      const Ranks& ranks) {
  return backend_for(input, "all_to_all").all_to_all(input, send_sizes, output, recv_sizes, ranks);
}

std::shared_ptr<Work> DeviceDispatchGroup::send(const Tensor& tensor, int64_t peer) {
  return backend_for(tensor, "send").send(tensor, peer);
}

std::shared_ptr<Work> DeviceDispatchGroup::recv(const Tensor& tensor, int64_t peer) {
  return backend_for(tensor, "recv").recv(tensor, peer);
}

void DeviceDispatchGroup::barrier(const Ranks& ranks) { cpu_->barrier(ranks); }

}  // namespace flow::distributed
